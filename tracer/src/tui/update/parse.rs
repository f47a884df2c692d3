//! What is typed at the prompts, read: a time to seek to, a kernel filter.

use crate::analysis::filter::FilterSpec;

/// Seconds since the start, from `90`, `1:30`, `1:02:03`, `1m30s`, `2h`, `45s`; `None` if unreadable.
pub fn parse_seek_time(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    if t.contains(':') {
        let parts: Vec<u64> = t.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        if parts.len() > 3 || parts.iter().skip(1).any(|p| *p >= 60) {
            return None;
        }
        return Some(parts.iter().fold(0u64, |acc, p| acc.saturating_mul(60).saturating_add(*p)));
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Some(secs);
    }
    let (mut total, mut number) = (0u64, String::new());
    for c in t.chars() {
        match c {
            '0'..='9' => number.push(c),
            'h' | 'm' | 's' if !number.is_empty() => {
                let n: u64 = number.parse().ok()?;
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total = total.saturating_add(n.saturating_mul(unit));
                number.clear();
            }
            _ => return None,
        }
    }
    number.is_empty().then_some(total)
}

/// `container=NAME cgroup=PATH netns=NAME`, space separated, each key as often as wanted; empty
/// is no filter. The first mistake is the error, in one line.
pub fn parse_filter_spec(text: &str) -> Result<FilterSpec, String> {
    let mut spec = FilterSpec::default();
    for term in text.split_whitespace() {
        let Some((key, value)) = term.split_once('=') else {
            return Err(format!("{term:?} is not KEY=VALUE (container=, cgroup= or netns=)"));
        };
        if value.is_empty() {
            return Err(format!("{key}= needs a value"));
        }
        let list = match key {
            "container" => &mut spec.containers,
            "cgroup" => &mut spec.cgroups,
            "netns" => &mut spec.netns,
            _ => return Err(format!("unknown key {key:?}: use container=, cgroup= or netns=")),
        };
        list.push(value.to_string());
    }
    Ok(spec)
}
