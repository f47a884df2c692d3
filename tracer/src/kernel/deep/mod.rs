//! `cctrace --deep`: instrumented twins of the kernel's congestion controls (`cct_cubic`,
//! `cct_reno`, `cct_bbr`, in twins.bpf.c) registered as BPF `tcp_congestion_ops`, whose
//! callbacks call the kernel's own implementation through its kfuncs and report each decision.
//!
//! Why libbpf-rs and C here, next to the aya programs: aya 0.14 cannot load a struct_ops map
//! (nor create the struct_ops link), and aya-ebpf cannot emit a `.struct_ops.link` section or
//! declare kfuncs with `__ksym`. libbpf does all of it, and libbpf-rs wraps it
//! (`Map::attach_struct_ops`). Moving this to aya needs, in a released aya: struct_ops map
//! loading with BTF value type fix-ups and `BPF_LINK_CREATE` for struct_ops; and in aya-ebpf: a
//! struct_ops program/map macro and kfunc calls. Then twins.bpf.c becomes a Rust module of
//! tracer-ebpf and this module a few lines of `EbpfLoader`.
//!
//! The twins are registered through links (`.struct_ops.link`): when this process ends, even by
//! SIGKILL, closing the link fds unregisters them. See [`session`] for what happens to the flows,
//! and [`feed`] for how the live source reads the decisions beside the samples.

pub mod feed;
#[cfg(test)]
mod layout_test;
pub mod session;

use std::os::fd::{AsFd, OwnedFd};

use libbpf_rs::{Link, MapCore, Object, ObjectBuilder};

use crate::analysis::deep_decisions::TwinAlgo;

/// The compiled twins; empty when the build machine lacked clang, bpftool or kernel BTF.
static TWINS_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/twins.bpf.o"));
/// Why the object is empty, if it is.
const DEEP_UNAVAILABLE: &str = env!("CCTRACE_DEEP_UNAVAILABLE");
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kfuncs each twin calls, by algorithm: all must be in the kernel's BTF.
const KFUNCS: [(TwinAlgo, &[&str]); 3] = [
    (
        TwinAlgo::Cubic,
        &[
            "cubictcp_init",
            "cubictcp_recalc_ssthresh",
            "cubictcp_cong_avoid",
            "cubictcp_state",
            "cubictcp_cwnd_event",
            "cubictcp_acked",
            "tcp_reno_undo_cwnd",
        ],
    ),
    (TwinAlgo::Reno, &["tcp_reno_ssthresh", "tcp_reno_cong_avoid", "tcp_reno_undo_cwnd"]),
    (
        TwinAlgo::Bbr,
        &[
            "bbr_init",
            "bbr_main",
            "bbr_sndbuf_expand",
            "bbr_undo_cwnd",
            "bbr_cwnd_event",
            "bbr_ssthresh",
            "bbr_min_tso_segs",
            "bbr_set_state",
        ],
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum DeepError {
    #[error("--deep is unavailable in this build ({0}); run `cargo xtask setup` and rebuild")]
    NotBuilt(&'static str),
    #[error("--deep needs kernel BTF ({KERNEL_BTF}): {0}")]
    NoBtf(String),
    #[error("--deep needs struct_ops support for tcp_congestion_ops (CONFIG_BPF_JIT, CONFIG_BPF_SYSCALL); this kernel's BTF has no bpf_struct_ops_tcp_congestion_ops")]
    NoStructOps,
    #[error("--deep registers its twins through struct_ops links (Linux 6.4), which this kernel lacks (its BTF has no bpf_struct_ops_link_create)")]
    NoStructOpsLinks,
    #[error("--deep needs the kernel's {algo} as kfuncs, and this kernel lacks {missing} (is tcp_{algo} built in or loaded?)", algo = .0.original(), missing = .1.join(", "))]
    NoKfuncs(TwinAlgo, Vec<&'static str>),
    #[error("{0} is registered already: another cctrace --deep runs")]
    InUse(&'static str),
    #[error("loading the deep-mode twins failed: {0}")]
    Load(String),
}

/// What this kernel lacks for deep mode, as one error; `Ok` when everything is there.
pub fn check_support() -> Result<(), DeepError> {
    if TWINS_OBJECT.is_empty() {
        return Err(DeepError::NotBuilt(DEEP_UNAVAILABLE));
    }
    let btf = btf_rs::Btf::from_file(KERNEL_BTF).map_err(|e| DeepError::NoBtf(e.to_string()))?;
    let named = |btf: &btf_rs::Btf, name: &str| btf.resolve_ids_by_name(name).is_ok_and(|ids| !ids.is_empty());
    if !named(&btf, "bpf_struct_ops_tcp_congestion_ops") {
        return Err(DeepError::NoStructOps);
    }
    // A link is what unregisters the twins when cctrace ends, however it ends; the kernel makes
    // one for a struct_ops map with this function (6.4; the link type itself is older).
    if !named(&btf, "bpf_struct_ops_link_create") {
        return Err(DeepError::NoStructOpsLinks);
    }
    for (algo, names) in KFUNCS {
        // An algorithm built as a module has its functions in the module's own BTF once loaded.
        let module = btf_rs::Btf::from_split_file(format!("/sys/kernel/btf/tcp_{}", algo.original()), &btf).ok();
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !named(&btf, n) && !module.as_ref().is_some_and(|m| named(m, n)))
            .collect();
        if !missing.is_empty() {
            return Err(DeepError::NoKfuncs(algo, missing));
        }
    }
    Ok(())
}

/// The twins, loaded and registered. Dropping this unregisters them (the links close).
pub struct Twins {
    // Field order matters for Drop: the links (registrations) go before the object.
    links: Vec<(TwinAlgo, Link)>,
    object: Object,
}

impl Twins {
    /// Load the object and register every twin.
    pub fn register() -> Result<Self, DeepError> {
        check_support()?;
        let available = crate::host::available_congestion_controls();
        for algo in TwinAlgo::ALL {
            if available.iter().any(|a| a == algo.twin()) {
                return Err(DeepError::InUse(algo.twin()));
            }
        }
        // libbpf writes its diagnostics (the verifier log included) to stderr by default: they
        // go to the log instead, and a failure is the one line returned below.
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Info, |_, msg| log::info!("libbpf: {}", msg.trim_end()))));
        let open = ObjectBuilder::default().open_memory(TWINS_OBJECT).map_err(|e| DeepError::Load(e.to_string()))?;
        let mut object = open.load().map_err(|e| DeepError::Load(e.to_string()))?;
        let mut links = Vec::new();
        for algo in TwinAlgo::ALL {
            let mut map = object
                .maps_mut()
                .find(|m| m.name() == algo.twin())
                .ok_or_else(|| DeepError::Load(format!("struct_ops map {} missing from the object", algo.twin())))?;
            let link =
                map.attach_struct_ops().map_err(|e| DeepError::Load(format!("registering {}: {e}", algo.twin())))?;
            links.push((algo, link));
        }
        Ok(Self { links, object })
    }

    /// A second descriptor of the decisions ring buffer, for the event source to read.
    pub fn decisions_fd(&self) -> std::io::Result<OwnedFd> {
        let map = self
            .object
            .maps()
            .find(|m| m.name() == "decisions")
            .ok_or_else(|| std::io::Error::other("decisions map missing from the twins object"))?;
        map.as_fd().try_clone_to_owned()
    }

    /// Records the twins wrote and lost (ring buffer full), summed over CPUs.
    pub fn counters(&self) -> (u64, u64) {
        let Some(map) = self.object.maps().find(|m| m.name() == "decision_counters") else { return (0, 0) };
        let sum = |index: u32| -> u64 {
            map.lookup_percpu(&index.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
                .ok()
                .flatten()
                .map(|per_cpu| {
                    per_cpu
                        .iter()
                        .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes))
                        .sum()
                })
                .unwrap_or(0)
        };
        (sum(0), sum(1))
    }

    /// The twins registered (all three once [`Twins::register`] returned).
    pub fn algorithms(&self) -> impl Iterator<Item = TwinAlgo> + '_ {
        self.links.iter().map(|(a, _)| *a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_missing_is_named_in_one_line() {
        let e = DeepError::NoKfuncs(TwinAlgo::Cubic, vec!["cubictcp_init", "cubictcp_acked"]);
        assert_eq!(
            e.to_string(),
            "--deep needs the kernel's cubic as kfuncs, and this kernel lacks cubictcp_init, cubictcp_acked \
             (is tcp_cubic built in or loaded?)"
        );
        for e in [
            DeepError::NoStructOps,
            DeepError::NoStructOpsLinks,
            DeepError::NotBuilt("clang not found"),
            DeepError::InUse("cct_bbr"),
        ] {
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
        }
    }
}
