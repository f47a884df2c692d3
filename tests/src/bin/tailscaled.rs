//! A relay that behaves like tailscaled in userspace-networking mode, for the UDP tests (see
//! `cctrace_lab::relay`). Named `tailscaled` so cctrace sees the process as the real one looks.
//!
//! `tailscaled --tun=userspace-networking --local ADDR --peer ADDR --rate-mbps N`

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    cctrace_lab::relay::relay_main(&args)
}
