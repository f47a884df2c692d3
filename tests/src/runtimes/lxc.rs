//! LXC from the busybox template, under the workspace's own lxcpath.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::*;

/// An LXC container from the busybox template under the workspace's own lxcpath, nginx started
/// in it with `lxc-attach`; stopped and destroyed on drop.
pub struct Lxc {
    pub(super) lxcpath: PathBuf,
    pub(super) name: String,
}

impl Lxc {
    pub(super) fn lxc(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.arg("-P").arg(&self.lxcpath).args(["-n", &self.name]);
        c
    }

    pub fn start(ws: &Workspace, name: &str) -> Result<Lxc, Unavailable> {
        require(&["lxc-create", "lxc-start", "lxc-attach", "busybox"], "lxc and busybox")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let lxcpath = ws.dir().join("lxc");
        fs::create_dir_all(&lxcpath).map_err(|e| refused(e.into()))?;
        let c = Lxc { lxcpath, name: name.to_string() };
        run(c.lxc("lxc-create").args(["-t", "busybox"])).map_err(refused)?;
        // No network from LXC (`empty`: a namespace with lo only), nginx and its files mounted.
        let config = c.lxcpath.join(name).join("config");
        let text = fs::read_to_string(&config).map_err(|e| refused(e.into()))?;
        let mut kept: String = text.lines().filter(|l| !l.starts_with("lxc.net.")).map(|l| format!("{l}\n")).collect();
        kept.push_str("lxc.net.0.type = empty\n");
        kept.push_str("lxc.mount.entry = /usr/sbin/nginx usr/sbin/nginx none ro,bind,create=file 0 0\n");
        kept.push_str(&format!("lxc.mount.entry = {} srv none ro,bind,create=dir 0 0\n", ws.www().display()));
        kept.push_str(&format!(
            "lxc.mount.entry = {} etc/nginx.conf none ro,bind,create=file 0 0\n",
            ws.nginx_conf().display()
        ));
        fs::File::create(&config).and_then(|mut f| f.write_all(kept.as_bytes())).map_err(|e| refused(e.into()))?;
        let log = c.lxcpath.join("lxc.log");
        let started = run(c.lxc("lxc-start").arg("-o").arg(&log).args(["-l", "INFO"]))
            .and_then(|_| run(c.lxc("lxc-wait").args(["-s", "RUNNING", "-t", "20"])));
        if let Err(e) = started {
            return Err(Unavailable::Refused(format!("{e:#}; {}", tail(&log, 5))));
        }
        // nginx daemonizes: its output (and the pipes it would hold open) go to a file.
        let nginx_log = c.lxcpath.join("nginx.log");
        let attached = fs::File::create(&nginx_log).map_err(anyhow::Error::from).and_then(|out| {
            let err = out.try_clone()?;
            c.lxc("lxc-attach")
                .args(["--", "/usr/sbin/nginx", "-c", "/etc/nginx.conf"])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .status_within(CHILD_DEADLINE)
        });
        match attached {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(Unavailable::Refused(format!("lxc-attach nginx: {s}: {}", tail(&nginx_log, 5)))),
            Err(e) => return Err(Unavailable::Refused(format!("lxc-attach nginx: {e}"))),
        }
        wait_listening(&c).map_err(refused)?;
        Ok(c)
    }
}

impl Container for Lxc {
    fn runtime(&self) -> &'static str {
        "lxc"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.name
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.lxc("lxc-info").args(["-p", "-H"]))?;
        out.trim().parse().with_context(|| format!("lxc-info pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        let out = run(Command::new("lxc-ls").arg("-P").arg(&self.lxcpath).args(["--running", "-1"]))?;
        Ok(out.split_whitespace().map(|n| (n.to_string(), n.to_string())).collect())
    }
    fn lxc_path(&self) -> Option<&Path> {
        Some(&self.lxcpath)
    }
}

impl Drop for Lxc {
    fn drop(&mut self) {
        let _ = run(self.lxc("lxc-stop").arg("-k"));
        let _ = run(self.lxc("lxc-destroy").arg("-f"));
    }
}
