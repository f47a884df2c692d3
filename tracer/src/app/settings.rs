//! What the command line says for the analysis, the container names and the kernel filter.

use crate::analysis::diagnosis::DiagnosisConfig;
use crate::analysis::filter::FilterSpec;
use crate::cgroups::ContainerFiles;
use crate::cli::Cli;

pub(super) fn diagnosis_config(cli: &Cli) -> DiagnosisConfig {
    DiagnosisConfig {
        heavy_min_bytes: (cli.heavy_mb * 1e6) as u64,
        heavy_min_bps: cli.heavy_mbps * 1e6,
        ..DiagnosisConfig::default()
    }
}

/// Where container names are read from: the runtimes' usual files, or what the command line
/// (or the demo's own files) says instead.
pub(super) fn container_files(cli: &Cli) -> ContainerFiles {
    let mut files = ContainerFiles::default();
    if let Some(dir) = &cli.docker_root {
        files.docker_root.clone_from(dir);
    }
    if !cli.podman_store.is_empty() {
        files.podman_stores.clone_from(&cli.podman_store);
    }
    if let Some(dir) = &cli.pve_lxc_dir {
        files.pve_lxc.clone_from(dir);
    }
    if let Some(dir) = &cli.kubelet_logs {
        files.kubelet_pod_logs = dir.join("pods");
        files.kubelet_container_logs = dir.join("containers");
    }
    files
}

pub(super) fn filter_spec(cli: &Cli) -> FilterSpec {
    FilterSpec { cgroups: cli.cgroup.clone(), containers: cli.container.clone(), netns: cli.netns.clone() }
}
