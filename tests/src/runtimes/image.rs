//! cctrace's own container image under the real engines: the archive the dist step writes, and
//! the `docker run` lines docs/container-image.md documents, read from that page so that what
//! the tests run is what users are told to run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use cctrace_lab::child::OutputWithin as _;

/// The page that documents the lines.
pub const DOC_PAGE: &str = "docs/container-image.md";
/// Where the suite says its dist step writes the image archive (xtask/src/suite.rs).
pub const IMAGE_ENV: &str = "CCTRACE_IMAGE";
/// The dist step runs beside the tests, at idle priority: how long a test waits for its image.
const IMAGE_WAIT: Duration = Duration::from_secs(600);
/// The engines' options that take a value (`--pid host`); the others are switches (`--rm`).
const VALUED: &[&str] = &[
    "--pid",
    "--network",
    "--net",
    "--cap-add",
    "--cap-drop",
    "--name",
    "--restart",
    "--cgroupns",
    "--uts",
    "-v",
    "--volume",
    "-e",
    "--env",
    "--security-opt",
    "--ulimit",
];

/// The tag the image is loaded under.
pub fn tag() -> String {
    format!("cctrace:{}", env!("CARGO_PKG_VERSION"))
}

/// One documented `docker run` line, split as the shell splits it: the engine's options, the
/// image, and cctrace's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLine {
    pub options: Vec<String>,
    pub image: String,
    pub args: Vec<String>,
}

impl RunLine {
    pub fn parse(line: &str) -> Result<RunLine> {
        let words = shlex::split(line).with_context(|| format!("unbalanced quotes in {line:?}"))?;
        let rest = match words.as_slice() {
            [docker, run, rest @ ..] if docker == "docker" && run == "run" => rest,
            _ => bail!("not a docker run line: {line:?}"),
        };
        let mut options = Vec::new();
        let mut i = 0;
        while i < rest.len() && rest[i].starts_with('-') {
            options.push(rest[i].clone());
            if VALUED.contains(&rest[i].as_str()) {
                options
                    .push(rest.get(i + 1).with_context(|| format!("{} without a value: {line:?}", rest[i]))?.clone());
                i += 1;
            }
            i += 1;
        }
        let image = rest.get(i).with_context(|| format!("no image in {line:?}"))?.clone();
        Ok(RunLine { options, image, args: rest[i + 1..].to_vec() })
    }

    /// The options as (flag, value) pairs, sorted: `-it` as `-i` and `-t`, `--flag=value` as the
    /// flag and its value, so two spellings of one setting compare equal.
    pub fn settings(&self) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        let mut words = self.options.iter();
        while let Some(word) = words.next() {
            if let Some((flag, value)) = word.split_once('=').filter(|_| word.starts_with("--")) {
                out.push((flag.to_string(), Some(value.to_string())));
            } else if VALUED.contains(&word.as_str()) {
                out.push((word.clone(), words.next().cloned()));
            } else if !word.starts_with("--") && word.len() > 2 {
                out.extend(word[1..].chars().map(|c| (format!("-{c}"), None)));
            } else {
                out.push((word.clone(), None));
            }
        }
        out.sort();
        out
    }

    /// cctrace's subcommand: `serve`, `fix`; none for the terminal UI.
    pub fn subcommand(&self) -> Option<&str> {
        self.args.first().map(String::as_str).filter(|a| !a.starts_with('-'))
    }

    /// The options without a terminal (`-t`, as `-it` or alone): a test reads the output.
    pub fn options_without_terminal(&self) -> Vec<String> {
        self.options
            .iter()
            .filter_map(|o| match o.as_str() {
                "-t" | "--tty" => None,
                "-it" | "-ti" => Some("-i".to_string()),
                _ => Some(o.clone()),
            })
            .collect()
    }
}

/// The lines the page documents: the terminal UI, the metrics service, the fix and its undo.
#[derive(Clone, Debug)]
pub struct DocumentedLines {
    pub ui: RunLine,
    pub serve: RunLine,
    pub fix: RunLine,
    pub undo: RunLine,
}

/// Every `docker run` line in the page's code blocks.
pub fn documented_lines() -> Result<DocumentedLines> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DOC_PAGE);
    let text = std::fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?;
    let mut in_code = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if in_code && line.starts_with("docker run ") {
            lines.push(RunLine::parse(line)?);
        }
    }
    let find = |what: &str, pred: &dyn Fn(&RunLine) -> bool| -> Result<RunLine> {
        let found: Vec<&RunLine> = lines.iter().filter(|l| pred(l)).collect();
        ensure!(found.len() == 1, "{DOC_PAGE} documents {} {what} lines, not one", found.len());
        Ok(found[0].clone())
    };
    let lines = DocumentedLines {
        ui: find("terminal UI", &|l| l.args.is_empty())?,
        serve: find("serve", &|l| l.subcommand() == Some("serve"))?,
        fix: find("fix", &|l| l.subcommand() == Some("fix") && !l.args.iter().any(|a| a == "--undo"))?,
        undo: find("fix --undo", &|l| l.subcommand() == Some("fix") && l.args.iter().any(|a| a == "--undo"))?,
    };
    for line in [&lines.ui, &lines.serve, &lines.fix, &lines.undo] {
        ensure!(line.image == tag(), "{DOC_PAGE}: {} is not the image {}", line.image, tag());
    }
    Ok(lines)
}

/// The image archive to test: the one the suite's dist step writes (`CCTRACE_IMAGE`: waited
/// for, since that step runs beside the tests), else one built now, as the suite would, with
/// `cargo xtask dist --profile check --no-boot` (minutes: outside the suite only).
pub fn archive() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(IMAGE_ENV).map(PathBuf::from) {
        return wait_for(&path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    eprintln!("{IMAGE_ENV} is not set: building the image with cargo xtask dist --profile check --no-boot");
    let status = Command::new("chrt")
        .args(["--idle", "0", "cargo", "xtask", "dist", "--profile", "check", "--no-boot"])
        .current_dir(&root)
        .status_within(Duration::from_secs(3600))
        .context("running cargo xtask dist")?;
    ensure!(status.success(), "cargo xtask dist --profile check failed ({status})");
    let path = root.join("target/dist-check").join(format!("cctrace_{}_amd64.oci.tar", env!("CARGO_PKG_VERSION")));
    ensure!(path.is_file(), "cargo xtask dist wrote no {}", path.display());
    Ok(path)
}

/// Wait until the dist step has written `path`, or said why it could not (`PATH.failed`).
fn wait_for(path: &Path) -> Result<PathBuf> {
    let failed = path.with_extension("failed");
    let started = Instant::now();
    loop {
        if path.is_file() {
            println!("the image from the dist step beside the tests, waited {:.1} s", started.elapsed().as_secs_f64());
            return Ok(path.to_path_buf());
        }
        if let Ok(why) = std::fs::read_to_string(&failed) {
            bail!("the dist step beside the tests wrote no image: {}", why.trim());
        }
        if started.elapsed() > IMAGE_WAIT {
            bail!(
                "no image at {} after {} s: did the dist step beside the tests run?",
                path.display(),
                IMAGE_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `engine load -i archive` (`engine` a `docker` or `podman` command with its global options);
/// the name the engine says it loaded.
pub fn load(mut engine: Command, archive: &Path) -> Result<String> {
    let out = super::run(engine.arg("load").arg("-i").arg(archive))?;
    let loaded = out.lines().find_map(|l| l.strip_prefix("Loaded image: ")).map(str::trim);
    loaded.map(str::to_string).with_context(|| format!("load said no image name: {out}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_splits_into_options_image_and_arguments() {
        let l =
            RunLine::parse("docker run --rm -it --pid host --cap-add SYS_ADMIN cctrace:0.1.0 fix --container 'my app'")
                .unwrap();
        assert_eq!(l.options, ["--rm", "-it", "--pid", "host", "--cap-add", "SYS_ADMIN"]);
        assert_eq!(l.image, "cctrace:0.1.0");
        assert_eq!(l.args, ["fix", "--container", "my app"]);
        assert_eq!(l.subcommand(), Some("fix"));
        assert_eq!(l.options_without_terminal(), ["--rm", "-i", "--pid", "host", "--cap-add", "SYS_ADMIN"]);
        let settings = l.settings();
        assert!(settings.contains(&("-t".into(), None)) && settings.contains(&("-i".into(), None)), "{settings:?}");
        let same = RunLine::parse("docker run -t -i --pid=host --rm --cap-add=SYS_ADMIN cctrace:0.1.0").unwrap();
        assert_eq!(same.settings(), settings);
        assert!(RunLine::parse("podman ps").is_err());
        assert!(RunLine::parse("docker run --pid").is_err());
    }

    #[test]
    fn the_page_documents_each_line_once_for_this_version() {
        let lines = documented_lines().unwrap();
        assert_eq!(lines.ui.subcommand(), None);
        assert_eq!(lines.serve.subcommand(), Some("serve"));
        assert!(lines.fix.args.iter().any(|a| a == "--live"), "{:?}", lines.fix);
    }
}
