//! The ports of the guests' flows, defined once: the init scripts get them as shell variables
//! written ahead of their first line, and the host's checks find the flows by the same constants.

/// The bulk loopback flow (the kernel matrix and the dist guest).
pub(crate) const LOOPBACK: u16 = 5001;
/// The lossy flow between two namespaces (the nft rule drops its data at random).
pub(crate) const LOSSY: u16 = 5002;
/// The idle connection the start-up listing must find.
pub(crate) const IDLE: u16 = 5003;
/// The UDP flow's receiver.
pub(crate) const UDP: u16 = 5004;
/// `fix_live`'s idle connection in namespace fx.
pub(crate) const FIX: u16 = 5010;

/// `script` (a `#!` line first) with the ports assigned right after that line.
pub(crate) fn with_ports(script: &str) -> String {
    let (shebang, body) = script.split_once('\n').expect("an init script starts with its #! line");
    format!(
        "{shebang}\nLOOPBACK_PORT={LOOPBACK} LOSSY_PORT={LOSSY} IDLE_PORT={IDLE} UDP_PORT={UDP} FIX_PORT={FIX}\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_use_only_the_ports_defined_here() {
        for script in [include_str!("guest_init.sh"), include_str!("../dist_init.sh")] {
            let set = with_ports(script);
            assert!(set.starts_with("#!/bin/busybox sh\nLOOPBACK_PORT=5001 "), "{}", &set[..80]);
            for port in [LOOPBACK, LOSSY, IDLE, UDP, FIX] {
                assert!(!script.contains(&port.to_string()), "{port} written in a script, not taken from guest_ports");
            }
        }
    }
}
