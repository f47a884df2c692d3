//! The container image `cargo xtask dist` writes beside the binary and the package, for hosts
//! that install everything as a container (Unraid, TrueNAS SCALE, Synology, docker compose).
//!
//! No image builder and no registry: the image is written here from the static binary, as an
//! OCI image layout in one tar file (`oci-layout`, `index.json`, the blobs under
//! `blobs/sha256/` named by their digests). Docker before 25 (Debian 12's 20.10) loads only its
//! own archive format, so the same tar also carries that format's `manifest.json`, naming the
//! same blobs: `docker load` reads `manifest.json`, `podman load` the OCI index. Both tag the
//! image `cctrace:VERSION`.
//!
//! One layer: the binary at /usr/bin/cctrace and the build machine's CA certificates (an OTLP
//! collector behind TLS is verified against them), nothing else. Every byte follows from the
//! binary, the certificates and the commit (its time stamps every entry): the same build gives
//! the same digests.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::arch::Arch;
use crate::shell;

/// Where the image keeps the binary (its entry point) and the CA certificates, as paths inside
/// the layer. /etc/ssl/certs/ca-certificates.crt is where the TLS client looks first, as on
/// Debian.
const BINARY_IN_IMAGE: &str = "usr/bin/cctrace";
const CA_IN_IMAGE: &str = "etc/ssl/certs/ca-certificates.crt";
/// The build machine's bundle (Debian's ca-certificates).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The directories the layer holds, parents first.
const DIRECTORIES: &[&str] = &["etc/", "etc/ssl/", "etc/ssl/certs/", "usr/", "usr/bin/"];
/// Set in the image's environment: cctrace run from its image reads the host's files in the
/// host's mount namespace when it may (tracer/src/host/mounts.rs reads it).
pub(crate) const IN_IMAGE_ENV: &str = "CCTRACE_ENTER_HOST_MOUNTS=1";

const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Where an OCI layout keeps its blobs, each named by its SHA-256.
const BLOBS: &str = "blobs/sha256/";

fn is_blob(path: &str) -> bool {
    path.strip_prefix(BLOBS).is_some_and(|hex| !hex.is_empty())
}

/// Where a blob of `digest` (`sha256:HEX`) lies in the layout.
fn blob_path(digest: &str) -> String {
    digest.replace("sha256:", BLOBS)
}

/// The archive of both architectures' images under one index, beside the per-architecture ones.
pub(crate) fn multiarch_file_name() -> String {
    format!("cctrace_{}_multiarch.oci.tar", env!("CARGO_PKG_VERSION"))
}

/// The tag both engines give the loaded image.
pub(crate) fn tag() -> String {
    format!("cctrace:{}", env!("CARGO_PKG_VERSION"))
}

/// The archive's file name for `arch`, beside the package's (`cctrace_0.1.0_amd64.oci.tar`).
pub(crate) fn file_name(arch: Arch) -> String {
    format!("cctrace_{}_{}.oci.tar", env!("CARGO_PKG_VERSION"), arch.debian())
}

/// How hard the layer is compressed: the users' image as small as gzip makes it, the suite's
/// (an unoptimised binary several times larger, written at idle priority) fast.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Packing {
    Smallest,
    Fastest,
}

impl Packing {
    fn level(self) -> flate2::Compression {
        match self {
            Self::Smallest => flate2::Compression::best(),
            Self::Fastest => flate2::Compression::fast(),
        }
    }
}

/// What [`write`] made.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) path: PathBuf,
    /// The layer's size unpacked: what `docker images` shows as the image's size.
    pub(crate) unpacked: u64,
}

/// The commit the binary was built from and its time, which labels the image and stamps its
/// entries.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Provenance {
    /// The full hash; empty outside a git checkout.
    commit: String,
    /// Seconds since the epoch (0 when unknown) and the same in RFC 3339.
    epoch: u64,
    created: String,
}

impl Provenance {
    /// The commit `cctrace --version` names, as git knows it in `root`.
    fn of(root: &Path, version_text: &str) -> Provenance {
        let short = version_text.lines().find_map(|l| l.strip_prefix("commit:")).map(str::trim).unwrap_or_default();
        let git = |args: &[&str]| crate::output(Command::new("git").current_dir(root).args(args));
        let known = short.chars().all(|c| c.is_ascii_hexdigit()) && !short.is_empty();
        let shown = known.then(|| git(&["show", "-s", "--format=%H %ct %cI", short])).flatten().unwrap_or_default();
        let mut fields = shown.split_whitespace();
        match (fields.next(), fields.next().and_then(|t| t.parse().ok()), fields.next()) {
            (Some(commit), Some(epoch), Some(created)) => {
                Provenance { commit: commit.to_string(), epoch, created: created.to_string() }
            }
            _ => Provenance { commit: String::new(), epoch: 0, created: "1970-01-01T00:00:00Z".to_string() },
        }
    }
}

/// One content-addressed blob.
struct Blob {
    bytes: Vec<u8>,
    hex: String,
}

impl Blob {
    fn new(bytes: Vec<u8>) -> Blob {
        let hex = sha256_hex(&bytes);
        Blob { bytes, hex }
    }

    fn digest(&self) -> String {
        format!("sha256:{}", self.hex)
    }

    fn path(&self) -> String {
        format!("{BLOBS}{}", self.hex)
    }

    fn descriptor(&self, media_type: &str) -> Value {
        json!({ "mediaType": media_type, "digest": self.digest(), "size": self.bytes.len() })
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Write the image of `binary` (built for `arch`) into `out_dir`; the file is replaced whole.
pub(crate) fn write(root: &Path, binary: &Path, arch: Arch, packing: Packing, out_dir: &Path) -> Result<Written> {
    let version_text = shell::sh(arch.run_here(binary).arg("--version"))?;
    write_from(binary, arch, packing, out_dir, &Provenance::of(root, &version_text))
}

/// [`write`], for the build `provenance` names.
fn write_from(binary: &Path, arch: Arch, packing: Packing, out_dir: &Path, provenance: &Provenance) -> Result<Written> {
    let files = [
        (BINARY_IN_IMAGE, std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?, 0o755),
        (
            CA_IN_IMAGE,
            std::fs::read(CA_BUNDLE).with_context(|| format!("reading {CA_BUNDLE} (ca-certificates)"))?,
            0o644,
        ),
    ];
    let layer_tar = tar_of(DIRECTORIES, &files, provenance.epoch)?;
    let unpacked = layer_tar.len() as u64;
    let diff_id = format!("sha256:{}", sha256_hex(&layer_tar));
    let layer = Blob::new(gzip(&layer_tar, packing)?);
    drop(layer_tar);
    let config = Blob::new(serde_json::to_vec(&config(arch, &diff_id, provenance))?);
    let manifest = Blob::new(serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(CONFIG_TYPE),
        "layers": [layer.descriptor(LAYER_TYPE)],
    }))?);
    let mut descriptor = manifest.descriptor(MANIFEST_TYPE);
    descriptor["platform"] = platform(arch);
    descriptor["annotations"] = names();
    let index = json!({ "schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [descriptor] });
    let docker = json!([{ "Config": config.path(), "RepoTags": [tag()], "Layers": [layer.path()] }]);
    let owned: Vec<(String, Vec<u8>)> = vec![
        ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        ("index.json".into(), serde_json::to_vec(&index)?),
        ("manifest.json".into(), serde_json::to_vec(&docker)?),
        (layer.path(), layer.bytes),
        (config.path(), config.bytes),
        (manifest.path(), manifest.bytes),
    ];
    let entries: Vec<(&str, &[u8], u32)> = owned.iter().map(|(p, b)| (p.as_str(), b.as_slice(), 0o644)).collect();
    let archive = tar_of(&["blobs/", BLOBS], &entries, provenance.epoch)?;
    std::fs::create_dir_all(out_dir)?;
    let path = out_dir.join(file_name(arch));
    let partial = path.with_extension("partial");
    std::fs::write(&partial, archive).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &path)?;
    Ok(Written { path, unpacked })
}

fn platform(arch: Arch) -> Value {
    match arch {
        Arch::X86_64 => json!({ "architecture": "amd64", "os": "linux" }),
        Arch::Aarch64 => json!({ "architecture": "arm64", "os": "linux", "variant": "v8" }),
    }
}

/// The image's configuration: what runs, with which environment, and the layer's digest.
fn config(arch: Arch, diff_id: &str, provenance: &Provenance) -> Value {
    let mut config = platform(arch);
    let mut labels = json!({
        "org.opencontainers.image.title": "cctrace",
        "org.opencontainers.image.description": "Live TCP congestion-control tracing with eBPF",
        "org.opencontainers.image.version": env!("CARGO_PKG_VERSION"),
        "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
        "org.opencontainers.image.created": provenance.created,
    });
    if !provenance.commit.is_empty() {
        labels["org.opencontainers.image.revision"] = json!(provenance.commit);
    }
    config["created"] = json!(provenance.created);
    config["config"] = json!({
        "Entrypoint": [format!("/{BINARY_IN_IMAGE}")],
        "Env": ["PATH=/usr/bin", IN_IMAGE_ENV],
        "WorkingDir": "/",
        "StopSignal": "SIGTERM",
        "Labels": labels,
    });
    config["rootfs"] = json!({ "type": "layers", "diff_ids": [diff_id] });
    config["history"] = json!([{ "created": provenance.created, "created_by": "cargo xtask dist" }]);
    config
}

/// A tar of `directories` (names ending in `/`) and then `files` (path, contents, mode), every
/// entry owned by root and stamped `mtime`.
fn tar_of<B: AsRef<[u8]>>(directories: &[&str], files: &[(&str, B, u32)], mtime: u64) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let header = |path: &str, size: u64, mode: u32, kind: tar::EntryType| -> Result<tar::Header> {
        let mut h = tar::Header::new_ustar();
        h.set_path(path)?;
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("root")?;
        h.set_groupname("root")?;
        h.set_mtime(mtime);
        h.set_entry_type(kind);
        h.set_cksum();
        Ok(h)
    };
    for dir in directories {
        builder.append(&header(dir, 0, 0o755, tar::EntryType::Directory)?, std::io::empty())?;
    }
    for (path, bytes, mode) in files {
        let bytes = bytes.as_ref();
        builder.append(&header(path, bytes.len() as u64, *mode, tar::EntryType::Regular)?, bytes)?;
    }
    Ok(builder.into_inner()?)
}

fn gzip(bytes: &[u8], packing: Packing) -> Result<Vec<u8>> {
    // No name and no time in the gzip header (GzBuilder's defaults): the same bytes every build.
    let mut encoder = flate2::GzBuilder::new().write(Vec::new(), packing.level());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// A tar's entries by path: contents (empty for a directory) and mode.
type Entries = BTreeMap<String, (Vec<u8>, u32)>;

/// One architecture's image, read from the archive [`write`] made: its blobs, the index's
/// descriptor of its manifest, and what build it is (version and commit, from its config).
struct Part {
    blobs: Entries,
    descriptor: Value,
    /// `0.1.0 at 3cc892e8a550`: images of one build share an index.
    build: String,
    mtime: u64,
}

impl Part {
    fn read(archive: &Path) -> Result<Part> {
        let bytes = std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?;
        let mut mtime = 0;
        for entry in tar::Archive::new(bytes.as_slice()).entries()? {
            mtime = mtime.max(entry?.header().mtime()?);
        }
        let mut files = entries_of(&bytes)?;
        let index: Value = serde_json::from_slice(&files.get("index.json").context("no index.json")?.0)?;
        let mut descriptor = index["manifests"][0].clone();
        let blob = |d: &Value| -> Result<Value> {
            let path = blob_path(d["digest"].as_str().context("a digest")?);
            Ok(serde_json::from_slice(&files.get(&path).with_context(|| format!("no {path}"))?.0)?)
        };
        let config = blob(&blob(&descriptor)?["config"])?;
        let labels = &config["config"]["Labels"];
        let label = |key: &str| labels[key].as_str().unwrap_or("unknown").to_string();
        let commit = label("org.opencontainers.image.revision");
        let build = format!("{} at {}", label("org.opencontainers.image.version"), commit.get(..12).unwrap_or(&commit));
        if let Some(d) = descriptor.as_object_mut() {
            d.remove("annotations");
        }
        files.retain(|path, _| is_blob(path));
        Ok(Part { blobs: files, descriptor, build, mtime })
    }
}

/// Write the images of `archives` ([`write`]'s, one per architecture, of one build) under one OCI
/// image index into `out_dir`: Podman loads the architecture of the host it runs on (Podman 4.3
/// here took amd64 from it). There is no Docker `manifest.json` in it: Docker 20.10 would load
/// the one image it named whatever the host's architecture, so it takes the per-architecture
/// archives.
pub(crate) fn write_index(archives: &[PathBuf], out_dir: &Path) -> Result<PathBuf> {
    let parts = archives.iter().map(|a| Part::read(a)).collect::<Result<Vec<_>>>()?;
    if let Some(why) = different_builds(&parts) {
        bail!("{why}");
    }
    let platforms = Blob::new(serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": parts.iter().map(|p| p.descriptor.clone()).collect::<Vec<_>>(),
    }))?);
    let mut descriptor = platforms.descriptor(INDEX_TYPE);
    descriptor["annotations"] = names();
    let index = json!({ "schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [descriptor] });
    let mtime = parts.iter().map(|p| p.mtime).max().unwrap_or(0);
    let mut blobs: Entries = parts.into_iter().flat_map(|p| p.blobs).collect();
    blobs.insert(platforms.path(), (platforms.bytes, 0o644));
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec();
    let index = serde_json::to_vec(&index)?;
    let mut entries: Vec<(&str, &[u8], u32)> = vec![("oci-layout", &layout, 0o644), ("index.json", &index, 0o644)];
    entries.extend(blobs.iter().map(|(path, (bytes, _))| (path.as_str(), bytes.as_slice(), 0o644)));
    let archive = tar_of(&["blobs/", BLOBS], &entries, mtime)?;
    let path = out_dir.join(multiarch_file_name());
    let partial = path.with_extension("partial");
    std::fs::write(&partial, archive).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// Why `parts` cannot share an index: they are of different builds (version, commit).
fn different_builds(parts: &[Part]) -> Option<String> {
    let builds: Vec<&str> = parts.iter().map(|p| p.build.as_str()).collect();
    builds
        .windows(2)
        .any(|w| w[0] != w[1])
        .then(|| format!("the images are of different builds: {}", builds.join(", ")))
}

/// Why the images of `archives` cannot share an index, if they cannot.
pub(crate) fn not_one_build(archives: &[PathBuf]) -> Result<Option<String>> {
    Ok(different_builds(&archives.iter().map(|a| Part::read(a)).collect::<Result<Vec<_>>>()?))
}

/// The names the index gives an image: Podman's (the reference name) and containerd's.
fn names() -> Value {
    json!({
        "io.containerd.image.name": format!("docker.io/library/{}", tag()),
        "org.opencontainers.image.ref.name": tag(),
    })
}

/// Fail unless `archive` is [`write_index`]'s of `archives`: every blob hashing to its name, one
/// index naming the image, under it exactly the architectures' manifests as their own archives
/// describe them, with all their blobs, and nothing else.
pub(crate) fn check_index(archive: &Path, archives: &[PathBuf]) -> Result<()> {
    let files = entries_of(&std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?)?;
    for (path, (bytes, _)) in files.iter().filter(|(p, _)| is_blob(p)) {
        ensure!(path.ends_with(&sha256_hex(bytes)), "{path} does not hash to its name");
    }
    let index: Value = serde_json::from_slice(&files.get("index.json").context("no index.json")?.0)?;
    let listed = index["manifests"].as_array().context("index.json lists nothing")?;
    ensure!(listed.len() == 1 && listed[0]["mediaType"] == INDEX_TYPE, "index.json: {index}");
    ensure!(listed[0]["annotations"] == names(), "index.json does not name the image {}", tag());
    let path = blob_path(listed[0]["digest"].as_str().context("a digest")?);
    let platforms: Value = serde_json::from_slice(&files.get(&path).with_context(|| format!("no {path}"))?.0)?;
    let parts = archives.iter().map(|a| Part::read(a)).collect::<Result<Vec<_>>>()?;
    let wanted: Vec<Value> = parts.iter().map(|p| p.descriptor.clone()).collect();
    ensure!(platforms["manifests"] == json!(wanted), "the index lists {}, not {wanted:?}", platforms["manifests"]);
    let mut expected: Vec<&str> = vec!["oci-layout", "index.json", "blobs/", BLOBS, &path];
    for part in &parts {
        for (blob, (bytes, _)) in &part.blobs {
            ensure!(files.get(blob).is_some_and(|(b, _)| b == bytes), "{blob} of an architecture is missing");
            expected.push(blob);
        }
    }
    ensure!(files.keys().all(|k| expected.contains(&k.as_str())), "the archive holds more: {:?}", files.keys());
    Ok(())
}

/// Every entry of a tar.
fn entries_of(tar_bytes: &[u8]) -> Result<Entries> {
    let mut out = BTreeMap::new();
    let mut archive = tar::Archive::new(tar_bytes);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let mode = entry.header().mode()?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        ensure!(out.insert(path.clone(), (bytes, mode)).is_none(), "{path} is in the tar twice");
    }
    Ok(out)
}

/// Read an archive [`write`] made back, as both engines would, and fail unless it is the image of
/// `binary` for `arch`: every blob matching its digest and size, the index, the OCI manifest and
/// Docker's `manifest.json` naming the same config and layer, the config saying `arch` and
/// naming the unpacked layer, and the layer holding exactly this binary and the build machine's
/// certificates.
pub(crate) fn check(archive: &Path, arch: Arch, binary: &Path) -> Result<()> {
    let files = entries_of(&std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?)?;
    let file = |path: &str| files.get(path).map(|(b, _)| b.as_slice()).with_context(|| format!("no {path}"));
    let json_of = |path: &str| -> Result<Value> { Ok(serde_json::from_slice(file(path)?)?) };
    let blob = |descriptor: &Value, media_type: &str| -> Result<&[u8]> {
        ensure!(descriptor["mediaType"] == media_type, "{descriptor} is not a {media_type}");
        let digest = descriptor["digest"].as_str().context("a descriptor without a digest")?;
        let hex = digest.strip_prefix("sha256:").context("a digest that is not sha256")?;
        let bytes = file(&format!("{BLOBS}{hex}"))?;
        ensure!(sha256_hex(bytes) == hex, "blob {digest} does not hash to its name");
        ensure!(descriptor["size"].as_u64() == Some(bytes.len() as u64), "{descriptor}: size is {}", bytes.len());
        Ok(bytes)
    };
    ensure!(json_of("oci-layout")?["imageLayoutVersion"] == "1.0.0", "oci-layout");
    let index = json_of("index.json")?;
    let listed = index["manifests"].as_array().context("index.json lists no manifests")?;
    ensure!(listed.len() == 1, "index.json lists {} manifests, not one", listed.len());
    ensure!(listed[0]["platform"] == platform(arch), "index.json: platform {}", listed[0]["platform"]);
    ensure!(listed[0]["annotations"]["org.opencontainers.image.ref.name"] == tag(), "index.json: not named {}", tag());
    let manifest: Value = serde_json::from_slice(blob(&listed[0], MANIFEST_TYPE)?)?;
    let config_bytes = blob(&manifest["config"], CONFIG_TYPE)?;
    let layers = manifest["layers"].as_array().context("the manifest lists no layers")?;
    ensure!(layers.len() == 1, "{} layers, not one", layers.len());
    let layer = blob(&layers[0], LAYER_TYPE)?;
    let docker = json_of("manifest.json")?;
    let digest_path = |d: &Value| d["digest"].as_str().map(blob_path);
    ensure!(
        docker
            == json!([{ "Config": digest_path(&manifest["config"]), "RepoTags": [tag()], "Layers": [digest_path(&layers[0])] }]),
        "Docker's manifest.json does not name the OCI manifest's blobs as {}: {docker}",
        tag()
    );
    let mut expected: Vec<String> =
        ["oci-layout", "index.json", "manifest.json", "blobs/", BLOBS].map(String::from).to_vec();
    expected.extend(
        [&listed[0], &manifest["config"], &layers[0]].iter().filter_map(|d| digest_path(d)).collect::<Vec<_>>(),
    );
    ensure!(files.keys().all(|k| expected.contains(k)), "the archive holds more: {:?}", files.keys());

    let config: Value = serde_json::from_slice(config_bytes)?;
    ensure!(config["architecture"] == arch.debian() && config["os"] == "linux", "config: {}", config["architecture"]);
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(layer).read_to_end(&mut unpacked).context("the layer is not gzip")?;
    let diff_id = format!("sha256:{}", sha256_hex(&unpacked));
    ensure!(config["rootfs"]["diff_ids"] == json!([diff_id]), "config's diff_ids are not the layer's {diff_id}");
    ensure!(
        config["config"]["Entrypoint"] == json!([format!("/{BINARY_IN_IMAGE}")]),
        "entry point {}",
        config["config"]["Entrypoint"]
    );
    ensure!(config["config"]["Env"].as_array().is_some_and(|e| e.contains(&json!(IN_IMAGE_ENV))), "no {IN_IMAGE_ENV}");

    let layer_files = entries_of(&unpacked)?;
    let names: Vec<&str> = layer_files.keys().map(String::as_str).collect();
    let mut wanted: Vec<&str> = DIRECTORIES.iter().copied().chain([BINARY_IN_IMAGE, CA_IN_IMAGE]).collect();
    wanted.sort_unstable();
    ensure!(names == wanted, "the layer holds {names:?}, not {wanted:?}");
    let same = |inside: &str, outside: &Path, mode: u32| -> Result<()> {
        let (bytes, got_mode) = &layer_files[inside];
        ensure!(*got_mode == mode, "/{inside} has mode {got_mode:o}, not {mode:o}");
        let here = std::fs::read(outside).with_context(|| format!("reading {}", outside.display()))?;
        ensure!(*bytes == here, "/{inside} in the image is not {}", outside.display());
        Ok(())
    };
    same(BINARY_IN_IMAGE, binary, 0o755)?;
    same(CA_IN_IMAGE, Path::new(CA_BUNDLE), 0o644)?;
    if std::str::from_utf8(&layer_files[CA_IN_IMAGE].0).map_or(0, |pem| pem.matches("BEGIN CERTIFICATE").count()) < 10 {
        bail!("the image's CA bundle holds fewer than ten certificates");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-image-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_tar_holds_what_it_was_given_stamped_and_owned_by_root() {
        let tar = tar_of(&["d/"], &[("d/f", b"abc".as_slice(), 0o755)], 1_700_000_000).unwrap();
        let entries = entries_of(&tar).unwrap();
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["d/", "d/f"]);
        assert_eq!(entries["d/f"], (b"abc".to_vec(), 0o755));
        let mut archive = tar::Archive::new(tar.as_slice());
        for entry in archive.entries().unwrap() {
            let h = entry.unwrap().header().clone();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()), (0, 0, 1_700_000_000));
        }
        // The same input, the same bytes: digests do not move between builds.
        assert_eq!(tar, tar_of(&["d/"], &[("d/f", b"abc".as_slice(), 0o755)], 1_700_000_000).unwrap());
    }

    #[test]
    fn provenance_is_the_commit_the_binary_names_or_none() {
        let root = crate::workspace_root();
        let head = crate::output(Command::new("git").current_dir(&root).args(["rev-parse", "HEAD"]));
        let Some(head) = head else { return };
        let p = Provenance::of(&root, &format!("cctrace 0.1.0\ncommit: {}\n", &head.trim()[..12]));
        assert_eq!(p.commit, head.trim());
        assert!(p.epoch > 1_600_000_000 && p.created.starts_with("20"), "{p:?}");
        let none = Provenance::of(&root, "cctrace 0.1.0\ncommit: unknown (not built from a git checkout)\n");
        assert_eq!((none.commit.as_str(), none.epoch), ("", 0));
    }

    /// A real image of a small executable, written and read back; every kind of damage the check
    /// exists for makes it fail.
    #[test]
    fn the_check_reads_back_what_was_written_and_refuses_damage() {
        if !Path::new(CA_BUNDLE).is_file() {
            assert!(std::env::var("CI").is_err(), "ca-certificates is missing under CI");
            return;
        }
        let dir = scratch("check");
        // Any executable that answers --version will do for the format: a script.
        let binary = dir.join("cctrace");
        std::fs::write(&binary, "#!/bin/sh\necho 'cctrace 0.1.0'\necho 'commit: unknown'\n").unwrap();
        crate::shell::set_executable(&binary).unwrap();
        let written = write(&crate::workspace_root(), &binary, Arch::X86_64, Packing::Fastest, &dir).unwrap();
        assert_eq!(written.path, dir.join(file_name(Arch::X86_64)));
        check(&written.path, Arch::X86_64, &binary).unwrap();
        let err = check(&written.path, Arch::Aarch64, &binary).unwrap_err();
        assert!(format!("{err:#}").contains("platform"), "{err:#}");

        let other = dir.join("other");
        std::fs::write(&other, "#!/bin/sh\n").unwrap();
        assert!(check(&written.path, Arch::X86_64, &other).is_err(), "another binary passed");

        let original = std::fs::read(&written.path).unwrap();
        let rewrite = |edit: &dyn Fn(&mut Entries)| {
            let mut entries = entries_of(&original).unwrap();
            edit(&mut entries);
            let (dirs, files): (Vec<_>, Vec<_>) = entries.iter().partition(|(k, _)| k.ends_with('/'));
            let dirs: Vec<&str> = dirs.iter().map(|(k, _)| k.as_str()).collect();
            let files: Vec<(&str, Vec<u8>, u32)> =
                files.iter().map(|(k, (b, m))| (k.as_str(), b.clone(), *m)).collect();
            std::fs::write(&written.path, tar_of(&dirs, &files, 0).unwrap()).unwrap();
            check(&written.path, Arch::X86_64, &binary)
        };
        assert!(rewrite(&|_| {}).is_ok(), "the archive rewritten unchanged must pass");
        assert!(
            rewrite(&|e| {
                e.remove("manifest.json");
            })
            .is_err(),
            "no manifest.json for Docker"
        );
        assert!(
            rewrite(&|e| {
                e.insert("extra".into(), (b"x".to_vec(), 0o644));
            })
            .is_err(),
            "an extra file"
        );
        let blob_key = |e: &Entries| e.keys().find(|k| k.len() > 20).unwrap().clone();
        assert!(
            rewrite(&|e| {
                let k = blob_key(e);
                e.get_mut(&k).unwrap().0.push(0);
            })
            .is_err(),
            "a blob that does not hash to its name"
        );
        assert!(
            rewrite(&|e| {
                let docker = e.get_mut("manifest.json").unwrap();
                docker.0 = String::from_utf8(docker.0.clone()).unwrap().replace(&tag(), "cctrace:latest").into_bytes();
            })
            .is_err(),
            "Docker's tag differs"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_index_holds_each_architecture_of_one_build_and_nothing_else() {
        if !Path::new(CA_BUNDLE).is_file() {
            assert!(std::env::var("CI").is_err(), "ca-certificates is missing under CI");
            return;
        }
        let dir = scratch("index");
        let binary = dir.join("cctrace");
        std::fs::write(&binary, "#!/bin/sh\n").unwrap();
        let build = |commit: &str| Provenance {
            commit: commit.to_string(),
            epoch: 1_700_000_000,
            created: "2023-11-14T22:13:20Z".to_string(),
        };
        let image = |arch: Arch, sub: &str, commit: &str| {
            write_from(&binary, arch, Packing::Fastest, &dir.join(sub), &build(commit)).unwrap().path
        };
        let _ = ["amd", "arm", "arm-other"].map(|d| std::fs::create_dir_all(dir.join(d)));
        let (one, another) = ("a1".repeat(20), "b2".repeat(20));
        let parts = vec![image(Arch::X86_64, "amd", &one), image(Arch::Aarch64, "arm", &one)];
        let index = write_index(&parts, &dir).unwrap();
        assert_eq!(index, dir.join(multiarch_file_name()));
        check_index(&index, &parts).unwrap();
        let platforms: Vec<Value> =
            parts.iter().map(|p| Part::read(p).unwrap().descriptor["platform"].clone()).collect();
        assert_eq!(platforms, [platform(Arch::X86_64), platform(Arch::Aarch64)]);

        let other = image(Arch::Aarch64, "arm-other", &another);
        let err = write_index(&[parts[0].clone(), other.clone()], &dir).unwrap_err();
        assert!(format!("{err:#}").contains("different builds"), "{err:#}");
        assert!(check_index(&index, &[parts[0].clone(), other]).is_err(), "another build's arm64 passed");
        assert!(check_index(&index, &parts[..1]).is_err(), "an index of two passed as one of amd64 alone");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
