//! `cctrace demo` as a live run sees it: its containers before the host is read, its lab once
//! the programs are attached. Built without the `demo` feature, the same calls do nothing, so
//! the live run has one path either way.

use anyhow::Result;

use crate::cgroups::ContainerFiles;

#[cfg(feature = "demo")]
pub(super) use crate::cli::args::DemoOptions;

/// No demo in a build without the lab: no value of this type exists.
#[cfg(not(feature = "demo"))]
pub(super) enum DemoOptions {}

/// The demo's containers and lab while a live run goes on; nothing when no demo was asked for.
/// Dropping it removes the lab's namespaces, then the containers, on every exit path (end of
/// --duration, Ctrl-C, SIGTERM, an error).
pub(super) struct Demo<'c> {
    opts: Option<&'c DemoOptions>,
    #[cfg(feature = "demo")]
    lab: Option<crate::demo_lab::DemoLab>,
    #[cfg(feature = "demo")]
    containers: Option<crate::demo_lab::DemoContainers>,
}

#[cfg(feature = "demo")]
impl<'c> Demo<'c> {
    /// The demo's containers, made before the host is read so `--container jellyfin` names one.
    pub(super) fn containers(opts: Option<&'c DemoOptions>) -> Result<Self> {
        let containers = opts.map(|_| crate::demo_lab::DemoContainers::create()).transpose()?;
        Ok(Self { opts, lab: None, containers })
    }

    /// Where the demo's container names are read from, instead of the runtimes' own files.
    pub(super) fn container_files(&self, mut files: ContainerFiles) -> ContainerFiles {
        if let Some(c) = &self.containers {
            files.docker_root = c.docker_root();
            files.pve_lxc = c.pve_lxc_dir();
        }
        files
    }

    /// The lab's paths and traffic, once tracing is attached so its connections are seen from
    /// their first packet.
    /// `duration`: the run's own (`--duration`), if it has one.
    pub(super) fn start_lab(&mut self, duration: Option<std::time::Duration>) -> Result<()> {
        if let (Some(opts), Some(containers)) = (self.opts, self.containers.as_mut()) {
            let duration = duration.unwrap_or(cctrace_lab::MAX_DURATION);
            self.lab = Some(crate::demo_lab::DemoLab::start(opts, duration, containers)?);
        }
        Ok(())
    }

    /// What the running lab is, for the start-up lines and the header.
    pub(super) fn description(&self) -> Option<String> {
        self.lab.as_ref().map(|d| d.description.clone())
    }
}

#[cfg(not(feature = "demo"))]
impl<'c> Demo<'c> {
    pub(super) fn containers(opts: Option<&'c DemoOptions>) -> Result<Self> {
        Ok(Self { opts })
    }

    pub(super) fn container_files(&self, files: ContainerFiles) -> ContainerFiles {
        files
    }

    pub(super) fn start_lab(&mut self, _duration: Option<std::time::Duration>) -> Result<()> {
        Ok(())
    }

    pub(super) fn description(&self) -> Option<String> {
        self.opts.map(|never| match *never {})
    }
}
