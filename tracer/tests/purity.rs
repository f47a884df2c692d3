//! The pure core (`tracer/src/analysis`) must stay free of the kernel loader, the async runtime,
//! the terminal and the host, so that it runs on recordings and test feeds without root. This
//! reads its sources and fails on any path into those.

use std::path::Path;

/// Paths that would tie the core to a side effect or an adapter.
const FORBIDDEN: &[&str] = &[
    "aya::",
    "aya_log",
    "tokio",
    "ratatui",
    "crossterm",
    "libc::",
    "std::fs",
    "std::process",
    "std::net::TcpStream",
    "std::time::Instant",
    "std::time::SystemTime",
    "std::thread",
    "crate::kernel",
    "crate::host",
    "crate::tui",
    "crate::output",
    "crate::clock",
    "crate::signals",
    "crate::demo",
];

#[test]
fn the_analysis_core_uses_no_kernel_runtime_terminal_or_host() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/analysis");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("src/analysis exists") {
        let path = entry.expect("readable directory").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                assert!(!code.contains(bad), "{}:{}: the pure core must not use {bad}: {line}", path.display(), n + 1);
            }
        }
    }
    assert!(files >= 5, "expected the core's modules under {}, found {files}", dir.display());
}
