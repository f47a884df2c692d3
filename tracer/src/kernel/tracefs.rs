//! Classic tracepoint support: find tracefs and read event record layouts from `format` files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

/// One field of a tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FormatField {
    pub offset: u32,
    pub size: u32,
}

/// Parse the `field:` lines of a tracefs `format` file into name -> (offset, size).
pub fn parse_format(text: &str) -> HashMap<String, FormatField> {
    let mut fields = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else { continue };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse::<u32>().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse::<u32>().ok();
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else { continue };
        // The name is the last identifier before any array suffix, whose size Linux 5.10 still
        // prints as written (`__u8 saddr[sizeof(struct sockaddr_in6)]`), later ones as a number.
        let decl = decl.split('[').next().unwrap_or(decl);
        let name = decl.rsplit([' ', '*']).next().unwrap_or(decl);
        fields.insert(name.to_string(), FormatField { offset, size });
    }
    fields
}

/// The tracefs mount point, mounting it at /sys/kernel/tracing if no mount exists.
pub fn tracefs_root() -> Result<PathBuf> {
    for candidate in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(candidate).join("events").is_dir() {
            return Ok(PathBuf::from(candidate));
        }
    }
    let target = "/sys/kernel/tracing";
    let status = std::process::Command::new("mount")
        .args(["-t", "tracefs", "tracefs", target])
        .stderr(std::process::Stdio::null())
        .status()
        .context("running mount -t tracefs")?;
    if status.success() && Path::new(target).join("events").is_dir() {
        return Ok(PathBuf::from(target));
    }
    Err(anyhow!("tracefs is not mounted and could not be mounted at {target}"))
}

/// Read the layout of `group:event`.
pub fn event_format(root: &Path, group: &str, event: &str) -> Result<HashMap<String, FormatField>> {
    let path = root.join("events").join(group).join(event).join("format");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_format(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET_STATE: &str = "name: inet_sock_set_state
ID: 1
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:const void * skaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int oldstate;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int newstate;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__u16 protocol;\toffset:30;\tsize:2;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:40;\tsize:16;\tsigned:0;

print fmt: \"x\"
";

    #[test]
    fn parses_fields_with_pointers_and_arrays() {
        let f = parse_format(SET_STATE);
        assert_eq!(f["skaddr"], FormatField { offset: 8, size: 8 });
        assert_eq!(f["oldstate"], FormatField { offset: 16, size: 4 });
        assert_eq!(f["newstate"].offset, 20);
        assert_eq!(f["protocol"], FormatField { offset: 30, size: 2 });
        assert_eq!(f["saddr_v6"], FormatField { offset: 40, size: 16 });
        assert_eq!(f["common_type"].offset, 0);
    }

    /// `tcp:tcp_probe`'s addresses on Linux 5.10, their size an expression.
    #[test]
    fn an_array_sized_by_an_expression_keeps_its_name() {
        let f = parse_format(
            "format:\n\tfield:__u8 saddr[sizeof(struct sockaddr_in6)];\toffset:8;\tsize:28;\tsigned:0;\n\tfield:__u8 daddr[28];\toffset:36;\tsize:28;\tsigned:0;\n",
        );
        assert_eq!(f["saddr"], FormatField { offset: 8, size: 28 });
        assert_eq!(f["daddr"], FormatField { offset: 36, size: 28 });
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn ignores_garbage() {
        assert!(parse_format("field:broken\nfield:int x; offset:zz; size:4;").is_empty());
    }
}
