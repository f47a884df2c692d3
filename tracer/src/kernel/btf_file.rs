//! Where the running kernel's BTF comes from: `/sys/kernel/btf/vmlinux` where the kernel was
//! built with it, else a file the user names (`--btf FILE`), else the places libbpf looks for
//! one (a `vmlinux` image of the running release with a `.BTF` section, as a distribution's
//! debug package installs it). A file counts only if it describes the running kernel: an ELF
//! image's GNU build id must be the one the kernel reports in `/sys/kernel/notes`.
//!
//! With a file, cctrace reads its struct offsets from it and runs its normal programs on the
//! classic tracepoints (BTF-typed programs need the kernel's own BTF, so they fall back); with
//! none, it runs without BTF (`kernel::nobtf`).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::KERNEL_BTF;

/// BTF's magic number, first in a raw BTF file (`/sys/kernel/btf/vmlinux`, `bpftool btf dump
/// file ... format raw`, pahole's `--btf_encode_detached`).
const BTF_MAGIC: u16 = 0xeb9f;

/// The running kernel's BTF, and where it was found.
#[derive(Clone, Debug)]
pub enum KernelBtf {
    /// `/sys/kernel/btf/vmlinux`.
    Kernel,
    /// A file's BTF (raw, or an ELF image's `.BTF` section).
    File { path: PathBuf, raw: Vec<u8> },
}

impl KernelBtf {
    /// Where it came from, in words.
    pub fn origin(&self) -> String {
        match self {
            Self::Kernel => KERNEL_BTF.to_string(),
            Self::File { path, .. } => path.display().to_string(),
        }
    }
}

/// Where libbpf looks for a kernel's BTF besides `/sys/kernel/btf/vmlinux`, for release `r`.
pub fn candidates(r: &str) -> Vec<PathBuf> {
    [
        format!("/boot/vmlinux-{r}"),
        format!("/lib/modules/{r}/vmlinux-{r}"),
        format!("/lib/modules/{r}/build/vmlinux"),
        format!("/usr/lib/modules/{r}/kernel/vmlinux"),
        format!("/usr/lib/debug/boot/vmlinux-{r}"),
        format!("/usr/lib/debug/boot/vmlinux-{r}.debug"),
        format!("/usr/lib/debug/lib/modules/{r}/vmlinux"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// What looking for BTF found: the BTF, or where it looked and why each place did not do.
#[derive(Debug)]
pub enum Found {
    Btf(KernelBtf),
    None(Vec<(PathBuf, String)>),
}

/// The kernel's BTF: `given` (an error if it is not this kernel's), else the kernel's own, else
/// the first of libbpf's places that holds this kernel's.
pub fn find(given: Option<&Path>) -> Result<Found> {
    if let Some(path) = given {
        let raw = read_btf(path)?;
        return Ok(Found::Btf(KernelBtf::File { path: path.to_path_buf(), raw }));
    }
    if Path::new(KERNEL_BTF).exists() {
        return Ok(Found::Btf(KernelBtf::Kernel));
    }
    let mut tried = Vec::new();
    for path in candidates(&crate::host::kernel_release()) {
        if !path.exists() {
            continue;
        }
        match read_btf(&path) {
            Ok(raw) => return Ok(Found::Btf(KernelBtf::File { path, raw })),
            Err(e) => tried.push((path, format!("{e:#}"))),
        }
    }
    Ok(Found::None(tried))
}

/// A file's BTF, checked to be the running kernel's where the file can say (an ELF image's
/// build id); a raw BTF file carries no build id and is taken as given.
pub fn read_btf(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("--btf {}", path.display()))?;
    if bytes.len() >= 2 && u16::from_le_bytes([bytes[0], bytes[1]]) == BTF_MAGIC {
        return Ok(bytes);
    }
    if !bytes.starts_with(b"\x7fELF") {
        bail!("{} is neither raw BTF nor an ELF image", path.display());
    }
    elf_btf(&bytes, running_build_id().as_deref()).with_context(|| format!("{}", path.display()))
}

/// An ELF image's `.BTF` section, if the image is the running kernel's (`running`: its build id,
/// when the kernel reports one).
fn elf_btf(bytes: &[u8], running: Option<&[u8]>) -> Result<Vec<u8>> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(bytes).map_err(|e| anyhow!("not a readable ELF image: {e}"))?;
    if let (Some(running), Ok(Some(own))) = (running, file.build_id()) {
        if own != running {
            bail!("is another kernel build's image (build id {}, the running kernel's {})", hex(own), hex(running));
        }
    }
    let section = file.section_by_name(".BTF").ok_or_else(|| anyhow!("has no .BTF section"))?;
    let data = section.uncompressed_data().map_err(|e| anyhow!("reading its .BTF section: {e}"))?;
    Ok(data.into_owned())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The running kernel's GNU build id, from the notes it exports.
fn running_build_id() -> Option<Vec<u8>> {
    build_id_of_notes(&std::fs::read("/sys/kernel/notes").ok()?)
}

/// The `NT_GNU_BUILD_ID` note's descriptor in an ELF note section's bytes.
fn build_id_of_notes(mut notes: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8], at: usize| Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let pad = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)? as usize, word(notes, 4)? as usize, word(notes, 8)?);
        let name = notes.get(12..12 + namesz)?;
        let desc_at = 12 + pad(namesz);
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == NT_GNU_BUILD_ID && name.starts_with(b"GNU") {
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_at + pad(descsz)..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_is_read_from_the_kernels_notes() {
        let mut notes = Vec::new();
        for (kind, name, desc) in [(6u32, &b"Linux\0"[..], &[1u8, 2, 3, 4][..]), (3, b"GNU\0", &[0xfa, 0x36, 0x77])] {
            notes.extend((name.len() as u32).to_ne_bytes());
            notes.extend((desc.len() as u32).to_ne_bytes());
            notes.extend(kind.to_ne_bytes());
            notes.extend(name);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
            notes.extend(desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        assert_eq!(build_id_of_notes(&notes), Some(vec![0xfa, 0x36, 0x77]));
        assert_eq!(build_id_of_notes(&notes[..20]), None);
    }

    #[test]
    fn libbpfs_places_are_searched_for_the_running_release() {
        let places = candidates("6.1.49-Unraid");
        assert_eq!(places[0], Path::new("/boot/vmlinux-6.1.49-Unraid"));
        assert!(places.contains(&PathBuf::from("/usr/lib/debug/boot/vmlinux-6.1.49-Unraid")));
    }

    #[test]
    fn a_raw_btf_file_is_taken_and_anything_else_is_said_in_a_line() {
        let dir = std::env::temp_dir().join(format!("cctrace-btf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("raw");
        std::fs::write(&raw, [0x9f, 0xeb, 1, 0]).unwrap();
        assert_eq!(read_btf(&raw).unwrap(), [0x9f, 0xeb, 1, 0]);
        let text = dir.join("text");
        std::fs::write(&text, "hello").unwrap();
        let e = format!("{:#}", read_btf(&text).unwrap_err());
        assert!(e.ends_with("is neither raw BTF nor an ELF image") && !e.contains('\n'), "{e}");
        let e = format!("{:#}", read_btf(&dir.join("absent")).unwrap_err());
        assert!(e.starts_with("--btf ") && e.contains("No such file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
