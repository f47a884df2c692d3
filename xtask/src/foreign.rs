//! Debian packages of another architecture (arm64's libraries, busybox, tools and kernel) or
//! release (bullseye's 5.10 kernel), fetched through a private apt configuration under
//! target/: its own package lists, status file and cache, the host's mirrors and keys. The
//! machine's own sources, architectures and dpkg database are left as they are (no `dpkg
//! --add-architecture`); nothing is installed, the packages are unpacked into directories of
//! the build's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{bail, ensure, Context, Result};

use crate::arch::Arch;
use crate::shell::sh;

/// Package lists older than this are fetched again before a download.
const LISTS_FRESH: Duration = Duration::from_secs(24 * 3600);

/// A private apt configuration for `arch`'s packages.
pub(crate) struct ForeignApt {
    dir: PathBuf,
    arch: Arch,
    /// What its package lists are of, for messages (`arm64`, `amd64 bullseye`).
    label: String,
}

impl ForeignApt {
    /// The configuration under `root`/target/apt-ARCH, its sources those of this machine.
    pub(crate) fn new(root: &Path, arch: Arch) -> Result<Self> {
        let sources = host_sources()?;
        ensure!(!sources.is_empty(), "this machine's apt configuration names no Debian source (deb) to fetch from");
        Self::with_sources(root, arch.debian().to_string(), arch, &sources)
    }

    /// The configuration under `root`/target/apt-ARCH-RELEASE for another Debian release
    /// (bullseye's 5.10 beside a bookworm host): this machine's sources of its own release, that
    /// release's name put in their suites (`bookworm-security` becomes `bullseye-security`).
    pub(crate) fn for_release(root: &Path, arch: Arch, release: &str) -> Result<Self> {
        let own = host_release()?;
        let sources: Vec<Source> = host_sources()?.into_iter().filter_map(|s| s.for_release(&own, release)).collect();
        ensure!(!sources.is_empty(), "this machine's apt configuration names no {own} source to fetch {release} from");
        Self::with_sources(root, format!("{} {release}", arch.debian()), arch, &sources)
    }

    fn with_sources(root: &Path, label: String, arch: Arch, sources: &[Source]) -> Result<Self> {
        let dir = root.join("target").join(format!("apt-{}", label.replace(' ', "-")));
        for sub in ["lists/partial", "cache/archives/partial", "sources.list.d"] {
            std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let list: String = sources.iter().map(|s| s.line(arch.debian()) + "\n").collect();
        std::fs::write(dir.join("sources.list"), list)?;
        // An empty dpkg database: dependencies are resolved as for an empty root, never against
        // the host's own packages of its own architecture.
        if !dir.join("status").exists() {
            std::fs::write(dir.join("status"), "")?;
        }
        Ok(Self { dir, arch, label })
    }

    /// The architecture whose packages this configuration fetches.
    pub(crate) fn arch(&self) -> Arch {
        self.arch
    }

    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        let arch = self.arch.debian();
        [
            format!("APT::Architecture={arch}"),
            format!("APT::Architectures={arch}"),
            format!("Dir::Etc::sourcelist={d}/sources.list"),
            format!("Dir::Etc::sourceparts={d}/sources.list.d"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::State::status={d}/status"),
            format!("Dir::Cache={d}/cache"),
            "Acquire::Languages=none".into(),
            // The files land in directories of root's: apt's download user could not write them.
            "APT::Sandbox::User=root".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    /// `apt-get` or `apt-cache` with this configuration.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(self.options()).env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    }

    /// Fetch the package lists unless fresh ones are there (or `force`).
    pub(crate) fn update(&self, force: bool) -> Result<()> {
        // When they were last fetched, from a file of ours: apt gives the lists the mirror's
        // own dates, days old for a release as settled as bullseye, which read as stale forever.
        let stamp = self.dir.join("lists-fetched");
        let fetched = std::fs::metadata(&stamp).and_then(|m| m.modified()).ok();
        let fresh = fetched.is_some_and(|t| SystemTime::now().duration_since(t).is_ok_and(|age| age < LISTS_FRESH));
        if fresh && !force {
            return Ok(());
        }
        crate::say(&format!("fetching Debian's {} package lists (a private apt configuration)", self.label));
        sh(self.command("apt-get").args(["update", "-qq"]))
            .with_context(|| format!("apt-get update for {} (is a Debian mirror reachable?)", self.label))?;
        std::fs::write(&stamp, "").with_context(|| format!("writing {}", stamp.display()))
    }

    /// Download `packages` (without their dependencies) into `into`; their .deb files.
    pub(crate) fn download(&self, packages: &[&str], into: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(into)?;
        self.with_fresh_lists(|| {
            sh(self.command("apt-get").args(["download", "-qq"]).args(packages).current_dir(into)).map(drop)
        })?;
        packages.iter().map(|p| find_deb(into, p)).collect()
    }

    /// Download `packages` and everything they depend on, as for an empty root; their .deb files.
    pub(crate) fn download_with_dependencies(&self, packages: &[&str]) -> Result<Vec<PathBuf>> {
        self.with_fresh_lists(|| {
            sh(self
                .command("apt-get")
                .args(["install", "--download-only", "--no-install-recommends", "-y", "-qq"])
                .args(packages))
            .map(drop)
        })?;
        let archives = self.dir.join("cache/archives");
        Ok(std::fs::read_dir(&archives)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "deb"))
            .collect())
    }

    /// Run `f` with the lists fetched when stale, and once more after fetching them again: a
    /// mirror drops the versions that day-old lists name.
    fn with_fresh_lists(&self, f: impl Fn() -> Result<()>) -> Result<()> {
        self.update(false)?;
        if f().is_ok() {
            return Ok(());
        }
        self.update(true)?;
        f()
    }
}

/// The .deb of `package` in `dir` (apt names it `PACKAGE_VERSION_ARCH.deb`).
pub(crate) fn find_deb(dir: &Path, package: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{package}_"))))
        .max()
        .with_context(|| format!("no {package} .deb in {}", dir.display()))
}

/// Unpack `debs` into `into` (dpkg-deb -x: files only, no maintainer script runs).
pub(crate) fn unpack(debs: &[PathBuf], into: &Path) -> Result<()> {
    std::fs::create_dir_all(into)?;
    for deb in debs {
        sh(Command::new("dpkg-deb").arg("-x").arg(deb).arg(into))
            .with_context(|| format!("unpacking {}", deb.display()))?;
    }
    Ok(())
}

/// Follow `path` inside `root` (an unpacked tree) through its symbolic links, absolute ones
/// taken as relative to `root`, never to this machine's own files.
pub(crate) fn resolve_in(root: &Path, path: &Path) -> Result<PathBuf> {
    let mut inside = path.strip_prefix("/").unwrap_or(path).to_path_buf();
    for _ in 0..16 {
        let full = root.join(&inside);
        let Ok(target) = std::fs::read_link(&full) else {
            ensure!(full.exists(), "{} is not in {}", path.display(), root.display());
            return Ok(full);
        };
        inside = if target.is_absolute() {
            target.strip_prefix("/").unwrap_or(&target).to_path_buf()
        } else {
            inside.parent().unwrap_or(Path::new("")).join(target)
        };
    }
    bail!("{}: too many symbolic links in {}", path.display(), root.display())
}

/// One `deb` source of this machine's apt configuration.
#[derive(Debug, PartialEq, Eq)]
struct Source {
    /// Options other than `arch` (`signed-by=...`).
    options: Vec<String>,
    uri: String,
    suite: String,
    components: Vec<String>,
}

impl Source {
    /// This source with `release` in place of `own` in its suite, when the suite is `own`'s
    /// (`own`, `own-updates`, `own-security`); other sources have no such counterpart.
    fn for_release(self, own: &str, release: &str) -> Option<Source> {
        let rest = self.suite.strip_prefix(own).filter(|rest| rest.is_empty() || rest.starts_with('-'))?;
        Some(Source { suite: format!("{release}{rest}"), ..self })
    }

    fn line(&self, arch: &str) -> String {
        let options: Vec<String> =
            std::iter::once(format!("arch={arch}")).chain(self.options.iter().cloned()).collect();
        format!("deb [{}] {} {} {}", options.join(" "), self.uri, self.suite, self.components.join(" "))
    }
}

/// This machine's Debian release by its code name (`VERSION_CODENAME` in /etc/os-release).
fn host_release() -> Result<String> {
    let text = std::fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .context("/etc/os-release names no VERSION_CODENAME")
}

/// The host's `deb` sources: /etc/apt/sources.list, sources.list.d/*.list (one line each) and
/// sources.list.d/*.sources (deb822 stanzas).
fn host_sources() -> Result<Vec<Source>> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut parts: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        parts.sort();
        files.extend(parts);
    }
    let mut sources = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        match file.extension().and_then(|x| x.to_str()) {
            Some("sources") => sources.extend(deb822_sources(&text)),
            Some("list") => sources.extend(text.lines().filter_map(one_line_source)),
            _ => {}
        }
    }
    Ok(sources)
}

fn one_line_source(line: &str) -> Option<Source> {
    let line = line.split('#').next()?.trim();
    let rest = line.strip_prefix("deb ")?.trim();
    let (options, rest) = match rest.strip_prefix('[') {
        Some(bracketed) => {
            let (opts, rest) = bracketed.split_once(']')?;
            (opts.split_whitespace().filter(|o| !o.starts_with("arch=")).map(str::to_string).collect(), rest)
        }
        None => (Vec::new(), rest),
    };
    let mut words = rest.split_whitespace();
    let uri = words.next()?.to_string();
    let suite = words.next()?.to_string();
    Some(Source { options, uri, suite, components: words.map(str::to_string).collect() })
}

fn deb822_sources(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in stanza.lines().filter(|l| !l.trim_start().starts_with('#')) {
            if line.starts_with(' ') || line.starts_with('\t') {
                if let Some((_, value)) = fields.last_mut() {
                    value.push(' ');
                    value.push_str(line.trim());
                }
            } else if let Some((key, value)) = line.split_once(':') {
                fields.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        let get = |k: &str| fields.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or("");
        if !get("types").split_whitespace().any(|t| t == "deb") || get("enabled") == "no" {
            continue;
        }
        let options: Vec<String> = match get("signed-by") {
            "" => Vec::new(),
            key => vec![format!("signed-by={key}")],
        };
        let components: Vec<String> = get("components").split_whitespace().map(str::to_string).collect();
        for uri in get("uris").split_whitespace() {
            for suite in get("suites").split_whitespace() {
                out.push(Source {
                    options: options.clone(),
                    uri: uri.to_string(),
                    suite: suite.to_string(),
                    components: components.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_stanzas_become_one_line_sources_for_the_other_architecture() {
        let text = "Types: deb\n# a comment\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n\
                    Components: main\nSigned-By: /usr/share/keyrings/k.gpg\n\n\
                    Types: deb-src\nURIs: http://mirror.invalid/debian\nSuites: bookworm\nComponents: main\n\n\
                    Types: deb\nEnabled: no\nURIs: http://off.invalid\nSuites: x\nComponents: main\n";
        let sources = deb822_sources(text);
        assert_eq!(sources.len(), 2, "{sources:?}");
        assert_eq!(
            sources[1].line("arm64"),
            "deb [arch=arm64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.invalid/debian bookworm-updates main"
        );
    }

    #[test]
    fn one_line_sources_keep_their_options_but_the_architecture() {
        let s = one_line_source("deb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main contrib # x")
            .unwrap();
        assert_eq!(s.line("arm64"), "deb [arch=arm64 signed-by=/k.gpg] http://m.invalid/debian bookworm main contrib");
        assert_eq!(one_line_source("deb-src http://m.invalid/debian bookworm main"), None);
        assert_eq!(one_line_source("# deb http://m.invalid/debian bookworm main"), None);
    }

    #[test]
    fn another_release_takes_the_suites_of_this_ones_sources_only() {
        let text = "Types: deb\nURIs: http://m.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
                    Types: deb\nURIs: http://m.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n\n\
                    Types: deb\nURIs: http://other.invalid\nSuites: bookworm2 stable\nComponents: main\n";
        let lines: Vec<String> = deb822_sources(text)
            .into_iter()
            .filter_map(|s| s.for_release("bookworm", "bullseye"))
            .map(|s| s.line("amd64"))
            .collect();
        assert_eq!(
            lines,
            [
                "deb [arch=amd64] http://m.invalid/debian bullseye main",
                "deb [arch=amd64] http://m.invalid/debian bullseye-updates main",
                "deb [arch=amd64] http://m.invalid/debian-security bullseye-security main",
            ]
        );
    }

    #[test]
    fn links_resolve_inside_the_unpacked_tree() {
        let root = std::env::temp_dir().join(format!("xtask-resolve-{}", std::process::id()));
        let lib = root.join("usr/lib/aarch64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libz.so.1.2.13"), "z").unwrap();
        std::os::unix::fs::symlink("libz.so.1.2.13", lib.join("libz.so.1")).unwrap();
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::os::unix::fs::symlink("/usr/lib/aarch64-linux-gnu/libz.so.1", root.join("lib/libz.so.1")).unwrap();
        assert_eq!(resolve_in(&root, Path::new("/lib/libz.so.1")).unwrap(), lib.join("libz.so.1.2.13"));
        assert!(resolve_in(&root, Path::new("/lib/missing.so")).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
