//! The ports of the guests' flows, defined once: the init scripts get them as shell variables
//! written ahead of their first line, and the host's checks find the flows by the same constants
//! ([`last_by_port`]).

use serde_json::Value;

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

/// The last value of every flow's fields, by local port, from the samples and flow records.
pub(crate) fn last_by_port(lines: &[Value], port: u16) -> Option<Value> {
    let mut merged = serde_json::Map::new();
    for v in lines {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !(kind == "sample" || kind == "flow") || v.get("sport").and_then(Value::as_u64) != Some(u64::from(port)) {
            continue;
        }
        if let Some(obj) = v.as_object() {
            for (k, val) in obj {
                if !val.is_null() {
                    merged.insert(k.clone(), val.clone());
                }
            }
        }
    }
    (!merged.is_empty()).then_some(Value::Object(merged))
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

    #[test]
    fn a_flow_is_its_samples_merged_with_the_latest_non_null_values() {
        let lines: Vec<Value> = [
            r#"{"type":"sample","sport":5001,"retrans":1,"owner":{"pid":7}}"#,
            r#"{"type":"sample","sport":5002,"retrans":9}"#,
            r#"{"type":"flow","sport":5001,"retrans":3,"owner":null}"#,
        ]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let f = last_by_port(&lines, 5001).unwrap();
        assert_eq!(f["retrans"], 3);
        assert_eq!(f["owner"]["pid"], 7);
        assert!(last_by_port(&lines, 1).is_none());
    }
}
