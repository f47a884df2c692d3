//! The live half of `cctrace fix --live` and of deep mode's moves: set the congestion control
//! of the sockets of one network namespace that a selection names, and report each socket it
//! touched. Where the kernel lets `iter/tcp` call `bpf_setsockopt` (5.15), `cct_iter_switch`
//! does it, run on a thread that entered the namespace (as the start-up listing walks each
//! one), under the iterator's socket lock; elsewhere each connection is switched through the
//! process holding it (`held_sockets`), and the connections that way cannot reach are said.
//! The fix's buffer sizing takes one sample of every socket with the start-up listing's
//! program, loaded from the same object when first asked. Without kernel BTF (no `iter/tcp`),
//! connections are switched through their holders and sampled with sock_diag.

use std::collections::HashMap as StdHashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, HashMap, MapData};
use aya::programs::Iter;
use aya::{Btf, Ebpf, EbpfLoader};
use tracer_common::{switch_mode, CcName, SwitchConfig, SWITCH_MAX_COOKIES, SWITCH_MAX_NAMES};

use super::attach::{error_chain, short};
use super::held_sockets;
use super::listing::read_iter_in;
use super::load;
use crate::analysis::fix_plan::{cc_bytes, decode_switch_records, held_switch_line, Switched, Unreached};
use crate::analysis::sample::{decode, DecodeContext, Sample};
use crate::host::setns_net;

const PROGRAM: &str = "cct_iter_switch";
/// The start-up listing's program: one sample of every TCP socket of a namespace.
const LISTING: &str = "cct_iter_tcp";

/// Switches sockets one of two ways, and samples them for the fix's buffers. Dropping it
/// unloads what it loaded.
pub struct Switcher {
    /// The eBPF object and the kernel's BTF, where the kernel has it; none without.
    kernel: Option<Iterators>,
    way: Way,
    /// What the last walk could not reach (switching through the holders only).
    unreached: Vec<Unreached>,
}

struct Iterators {
    /// The eBPF object: `cct_iter_switch` loaded in the kernel where it may be (see
    /// [`Way`]), `cct_iter_tcp` once a snapshot asks for it.
    ebpf: Ebpf,
    /// The kernel's BTF as aya reads it, kept for the listing's program (reading it again cost
    /// as much as loading both programs).
    btf: Btf,
    listing_loaded: bool,
}

enum Way {
    /// `cct_iter_switch` sets the algorithm under the iterator's socket lock.
    Iterator,
    /// Through the processes holding the sockets, because of this (`iter/tcp` refused).
    Held(String),
}

/// Why the iterator cannot switch, in words: the helper the kernel refused it, else the refusal.
fn iterator_refusal(whole: &str) -> String {
    match whole.split("unknown func ").nth(1).and_then(|rest| rest.split(['#', ' ', '\n']).next()) {
        Some(helper) => format!("this kernel's iter/tcp cannot call {helper} (bpf_setsockopt there: Linux 5.15)"),
        None => format!("the iter/tcp switch did not load ({})", short(&whole)),
    }
}

impl Switcher {
    /// Check privileges, resolve the offsets the program reads, load it; where the kernel
    /// refuses it, sockets are switched through the processes holding them.
    pub fn load() -> Result<Self> {
        if !Path::new(super::KERNEL_BTF).exists() {
            super::caps::check()?;
            let why = format!("no kernel BTF ({}), which iter/tcp needs", super::KERNEL_BTF);
            return Ok(Self { kernel: None, way: Way::Held(why), unreached: Vec::new() });
        }
        let (prelude, _) = load::prelude(&super::btf_file::KernelBtf::Kernel)?;
        // The tracing maps are not used here: the smallest ring buffer, one page, will do.
        let mut ebpf = prelude.load(EbpfLoader::new().map_max_entries("EVENTS", crate::host::page_size()))?;
        let btf = Btf::from_sys_fs().context("kernel BTF (needed by iter/tcp)")?;
        let prog: &mut Iter = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| anyhow!("program {PROGRAM} missing from the eBPF object"))?
            .try_into()
            .map_err(|e| anyhow!("{PROGRAM}: {}", error_chain(&e)))?;
        let way = match prog.load("tcp", &btf) {
            Ok(()) => Way::Iterator,
            Err(e) => {
                let whole = error_chain(&e);
                log::info!("loading {PROGRAM} failed, switching through the sockets' holders: {whole}");
                Way::Held(iterator_refusal(&whole))
            }
        };
        let kernel = Some(Iterators { ebpf, btf, listing_loaded: false });
        Ok(Self { kernel, way, unreached: Vec::new() })
    }

    /// One sample of every TCP socket of each namespace of `namespaces` (inode, path) that can
    /// be entered, as the start-up listing takes them: what the fix sizes buffers from.
    pub fn snapshot(&mut self, namespaces: &[(u32, std::path::PathBuf)]) -> Result<Vec<Sample>> {
        let Some(kernel) = &mut self.kernel else { return Ok(super::nobtf::snapshot(namespaces)) };
        if !kernel.listing_loaded {
            let prog: &mut Iter = kernel
                .ebpf
                .program_mut(LISTING)
                .ok_or_else(|| anyhow!("program {LISTING} missing from the eBPF object"))?
                .try_into()
                .map_err(|e| anyhow!("{LISTING}: {}", error_chain(&e)))?;
            prog.load("tcp", &kernel.btf).map_err(|e| anyhow!("loading {LISTING}: {}", error_chain(&e)))?;
            kernel.listing_loaded = true;
        }
        let ctx = DecodeContext { hz: super::hz::kernel_hz().unwrap_or(super::hz::GUESSED_HZ) };
        let prog: &mut Iter =
            kernel.ebpf.program_mut(LISTING).context("program missing")?.try_into().map_err(|e| anyhow!("{e}"))?;
        let mut out = Vec::new();
        for (netns, path) in namespaces {
            // A namespace gone or not enterable has nothing to size for.
            let Ok(bytes) = read_iter_in(prog, *netns, path, setns_net) else { continue };
            out.extend(bytes.chunks_exact(tracer_common::FLOW_SAMPLE_SIZE).filter_map(|r| decode(r, &ctx).ok()));
        }
        Ok(out)
    }

    /// The plan's line when sockets are switched through their holders: why, and what the
    /// last walk could not reach. `None` when the iterator switches.
    pub fn note(&self) -> Option<String> {
        match &self.way {
            Way::Iterator => None,
            Way::Held(why) => Some(held_switch_line(why, &self.unreached)),
        }
    }

    fn set_config(ebpf: &mut Ebpf, mode: u32) -> Result<()> {
        let mut config: Array<&mut MapData, SwitchConfig> =
            Array::try_from(ebpf.map_mut("SWITCH_CONFIG").context("SWITCH_CONFIG map missing")?)?;
        config.set(0, SwitchConfig { mode, _pad: 0 }, 0)?;
        Ok(())
    }

    /// Walk namespace `netns` once: with the iterator in `mode` (its maps filled by `fill`),
    /// or through the holders with `choose` (cookie, algorithm -> the algorithm to set).
    fn run(
        &mut self,
        netns: u32,
        path: &Path,
        mode: u32,
        fill: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
        choose: &dyn Fn(u64, &str) -> Option<String>,
    ) -> Result<Vec<Switched>> {
        let walking = || format!("walking the sockets of network namespace {netns}");
        match (&self.way, &mut self.kernel) {
            (Way::Iterator, Some(kernel)) => {
                let ebpf = &mut kernel.ebpf;
                fill(ebpf)?;
                Self::set_config(ebpf, mode)?;
                let prog: &mut Iter =
                    ebpf.program_mut(PROGRAM).context("program missing")?.try_into().map_err(|e| anyhow!("{e}"))?;
                let bytes = read_iter_in(prog, netns, path, setns_net).with_context(walking)?;
                Ok(decode_switch_records(&bytes))
            }
            _ => {
                let (touched, unreached) = held_sockets::switch_where(netns, path, choose).with_context(walking)?;
                self.unreached = unreached;
                Ok(touched)
            }
        }
    }

    /// Every full TCP socket of namespace `netns` (opened at `path`) with its algorithm,
    /// changing nothing: what a plan offers to switch.
    pub fn list(&mut self, netns: u32, path: &Path) -> Result<Vec<Switched>> {
        self.run(netns, path, switch_mode::LIST, &mut |_| Ok(()), &|_, cc| Some(cc.to_string()))
    }

    /// Switch exactly the sockets in `cookies` that are still alive, each to the algorithm
    /// named with it (the ones a plan chose, or undo's way back).
    pub fn switch_cookies(&mut self, netns: u32, path: &Path, cookies: &[(u64, String)]) -> Result<Vec<Switched>> {
        if cookies.len() > SWITCH_MAX_COOKIES as usize {
            bail!("{} sockets to switch, at most {SWITCH_MAX_COOKIES} at once", cookies.len());
        }
        let chosen: StdHashMap<u64, String> = cookies.iter().cloned().collect();
        let mut fill = |ebpf: &mut Ebpf| -> Result<()> {
            let mut map: HashMap<&mut MapData, u64, CcName> =
                HashMap::try_from(ebpf.map_mut("SWITCH_COOKIES").context("SWITCH_COOKIES map missing")?)?;
            // A previous call's choice must not carry over into this one.
            let stale: Vec<u64> = map.keys().filter_map(Result::ok).collect();
            for cookie in stale {
                map.remove(&cookie)?;
            }
            for (cookie, cc) in cookies {
                map.insert(cookie, CcName { name: cc_bytes(cc) }, 0)?;
            }
            Ok(())
        };
        self.run(netns, path, switch_mode::COOKIES, &mut fill, &|cookie, _| chosen.get(&cookie).cloned())
    }

    /// Switch every socket whose algorithm is a `from` of `pairs` to its `to` (deep mode moves
    /// flows onto the twins and back with this).
    pub fn switch_names(&mut self, netns: u32, path: &Path, pairs: &[(&str, &str)]) -> Result<Vec<Switched>> {
        if pairs.len() > SWITCH_MAX_NAMES as usize {
            bail!("{} algorithm pairs to switch, at most {SWITCH_MAX_NAMES}", pairs.len());
        }
        let mut fill = |ebpf: &mut Ebpf| -> Result<()> {
            let mut map: HashMap<&mut MapData, CcName, CcName> =
                HashMap::try_from(ebpf.map_mut("SWITCH_NAMES").context("SWITCH_NAMES map missing")?)?;
            let stale: Vec<CcName> = map.keys().filter_map(Result::ok).collect();
            for key in stale {
                map.remove(&key)?;
            }
            for (from, to) in pairs {
                map.insert(CcName { name: cc_bytes(from) }, CcName { name: cc_bytes(to) }, 0)?;
            }
            Ok(())
        };
        let choose = |_: u64, cc: &str| pairs.iter().find(|(from, _)| *from == cc).map(|(_, to)| to.to_string());
        self.run(netns, path, switch_mode::NAMES, &mut fill, &choose)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_iterator_is_said_by_the_helper_the_kernel_lacks() {
        let log = "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier output: arg#0 type is not a struct\n    29: (85) call bpf_getsockopt#57\n    unknown func bpf_getsockopt#57\n";
        assert_eq!(
            iterator_refusal(log),
            "this kernel's iter/tcp cannot call bpf_getsockopt (bpf_setsockopt there: Linux 5.15)"
        );
        let other = iterator_refusal("unknown BTF type `bpf_iter_tcp`");
        assert_eq!(other, "the iter/tcp switch did not load (unknown BTF type `bpf_iter_tcp`)");
    }
}
