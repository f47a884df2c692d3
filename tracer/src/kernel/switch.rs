//! The live half of `cctrace fix --live`: `cct_iter_switch` run in one network namespace, on a
//! thread that entered it (the same way the start-up listing walks each namespace), switching
//! the congestion control of the sockets `SWITCH_CONFIG` selects and reporting each socket it
//! touched.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, HashMap, MapData};
use aya::programs::Iter;
use aya::{Btf, Ebpf, EbpfLoader};
use tracer_common::{switch_mode, CcName, SwitchConfig, SWITCH_MAX_COOKIES, SWITCH_MAX_NAMES};

use super::listing::{enter_netns, read_iter_in};
use super::{caps, error_chain, offsets, raise_memlock, EBPF_OBJECT, EBPF_UNAVAILABLE};
use crate::analysis::fix_plan::{cc_bytes, decode_switch_records, Switched};

const PROGRAM: &str = "cct_iter_switch";

/// The eBPF object loaded with only `cct_iter_switch` in the kernel. Dropping it unloads it.
pub struct Switcher {
    ebpf: Ebpf,
}

impl Switcher {
    /// Check privileges, resolve the offsets the program reads, load it.
    pub fn load() -> Result<Self> {
        if EBPF_OBJECT.is_empty() {
            bail!("this cctrace was built without its eBPF programs ({EBPF_UNAVAILABLE}); run `cargo xtask setup` and rebuild");
        }
        caps::check()?;
        let resolver = offsets::BtfResolver::from_sys_fs()?;
        let resolved = offsets::resolve(&resolver).context("resolving kernel struct offsets from BTF")?;
        raise_memlock();
        let mut ebpf = EbpfLoader::new()
            // The tracing maps are not used here: the smallest ring buffer, one page, will do.
            .map_max_entries("EVENTS", crate::host::page_size())
            .override_global("OFFSETS", &resolved.offsets, true)
            .load(EBPF_OBJECT)
            .map_err(|e| anyhow!("loading the eBPF object into the kernel failed: {}", error_chain(&e)))?;
        let btf = Btf::from_sys_fs().context("kernel BTF (needed by iter/tcp)")?;
        let prog: &mut Iter = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| anyhow!("program {PROGRAM} missing from the eBPF object"))?
            .try_into()
            .map_err(|e| anyhow!("{PROGRAM}: {}", error_chain(&e)))?;
        prog.load("tcp", &btf).map_err(|e| anyhow!("loading {PROGRAM}: {}", error_chain(&e)))?;
        Ok(Self { ebpf })
    }

    fn set_config(&mut self, mode: u32) -> Result<()> {
        let mut config: Array<&mut MapData, SwitchConfig> =
            Array::try_from(self.ebpf.map_mut("SWITCH_CONFIG").context("SWITCH_CONFIG map missing")?)?;
        config.set(0, SwitchConfig { mode, _pad: 0 }, 0)?;
        Ok(())
    }

    fn run(&mut self, netns: u32, path: &Path) -> Result<Vec<Switched>> {
        let prog: &mut Iter =
            self.ebpf.program_mut(PROGRAM).context("program missing")?.try_into().map_err(|e| anyhow!("{e}"))?;
        let bytes = read_iter_in(prog, netns, path, enter_netns)
            .with_context(|| format!("walking the sockets of network namespace {netns}"))?;
        Ok(decode_switch_records(&bytes))
    }

    /// Every full TCP socket of namespace `netns` (opened at `path`) with its algorithm,
    /// changing nothing: what a plan offers to switch.
    pub fn list(&mut self, netns: u32, path: &Path) -> Result<Vec<Switched>> {
        self.set_config(switch_mode::LIST)?;
        self.run(netns, path)
    }

    /// Switch exactly the sockets in `cookies` that are still alive, each to the algorithm
    /// named with it (the ones a plan chose, or undo's way back).
    pub fn switch_cookies(&mut self, netns: u32, path: &Path, cookies: &[(u64, String)]) -> Result<Vec<Switched>> {
        if cookies.len() > SWITCH_MAX_COOKIES as usize {
            bail!("{} sockets to switch, at most {SWITCH_MAX_COOKIES} at once", cookies.len());
        }
        {
            let mut map: HashMap<&mut MapData, u64, CcName> =
                HashMap::try_from(self.ebpf.map_mut("SWITCH_COOKIES").context("SWITCH_COOKIES map missing")?)?;
            // A previous call's choice must not carry over into this one.
            let stale: Vec<u64> = map.keys().filter_map(Result::ok).collect();
            for cookie in stale {
                map.remove(&cookie)?;
            }
            for (cookie, cc) in cookies {
                map.insert(cookie, CcName { name: cc_bytes(cc) }, 0)?;
            }
        }
        self.set_config(switch_mode::COOKIES)?;
        self.run(netns, path)
    }

    /// Switch every socket whose algorithm is a `from` of `pairs` to its `to` (deep mode moves
    /// flows onto the twins and back with this).
    pub fn switch_names(&mut self, netns: u32, path: &Path, pairs: &[(&str, &str)]) -> Result<Vec<Switched>> {
        if pairs.len() > SWITCH_MAX_NAMES as usize {
            bail!("{} algorithm pairs to switch, at most {SWITCH_MAX_NAMES}", pairs.len());
        }
        {
            let mut map: HashMap<&mut MapData, CcName, CcName> =
                HashMap::try_from(self.ebpf.map_mut("SWITCH_NAMES").context("SWITCH_NAMES map missing")?)?;
            let stale: Vec<CcName> = map.keys().filter_map(Result::ok).collect();
            for key in stale {
                map.remove(&key)?;
            }
            for (from, to) in pairs {
                map.insert(CcName { name: cc_bytes(from) }, CcName { name: cc_bytes(to) }, 0)?;
            }
        }
        self.set_config(switch_mode::NAMES)?;
        self.run(netns, path)
    }
}
