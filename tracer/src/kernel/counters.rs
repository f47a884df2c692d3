//! The programs' own counters (`COUNTERS`, one per-CPU slot per [`counter`] index): samples
//! emitted and lost, reads that failed, a full flow map, flows the filter left out, and a rough
//! count of `tcp_probe`'s runs.

use std::collections::HashMap;

use anyhow::{anyhow, Context, Result};
use aya::maps::{MapData, PerCpuArray};
use aya::Ebpf;
use tracer_common::counter;

pub(super) struct CounterMap(PerCpuArray<MapData, u64>);

impl CounterMap {
    /// Take the `COUNTERS` map out of the loaded object.
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self> {
        let map = ebpf.take_map("COUNTERS").ok_or_else(|| anyhow!("COUNTERS map missing"))?;
        PerCpuArray::try_from(map).context("opening the COUNTERS map").map(Self)
    }

    /// One counter, summed over CPUs; 0 when it cannot be read.
    pub(super) fn get(&self, index: u32) -> u64 {
        self.0.get(&index, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Every counter by the name the summary and the metrics give it.
    pub(super) fn by_name(&self) -> HashMap<&'static str, u64> {
        HashMap::from([
            ("ringbuf_lost", self.get(counter::RINGBUF_LOST)),
            ("emitted", self.get(counter::EMITTED)),
            ("read_errors", self.get(counter::READ_ERRORS)),
            ("flow_map_full", self.get(counter::FLOW_MAP_FULL)),
            ("filtered", self.get(counter::FILTERED)),
            ("probe_runs", self.get(counter::PROBE_RUNS)),
        ])
    }
}
