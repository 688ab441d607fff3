//! The consolidation plan as a `mig-parted` configuration, each card's new layout by name.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The plan as a `mig-parted` configuration (`nvidia-mig-parted apply -f FILE -c NAME`): one named
/// configuration per card (its uuid and its instances' profiles), `slicemeter-<gpu uuid>`. The collector does not report a card's index
/// on its node, so `devices` is `all`: apply a card's configuration with only that card visible
/// to `mig-parted`, or replace `all` with its index.
pub(super) fn mig_parted<'a>(cards: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>) -> String {
    let mut out = String::from("version: v1\nmig-configs:\n");
    let mut any = false;
    for (gpu_uuid, profiles) in cards {
        any = true;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for p in profiles {
            *counts.entry(p).or_default() += 1;
        }
        let _ = writeln!(out, "  {}:", yaml_string(&format!("slicemeter-{gpu_uuid}")));
        let _ = writeln!(out, "    - devices: all");
        let _ = writeln!(out, "      mig-enabled: true");
        let _ = writeln!(out, "      mig-devices:");
        for (profile, n) in counts {
            let _ = writeln!(out, "        {}: {n}", yaml_string(profile));
        }
    }
    if !any {
        return "version: v1\nmig-configs: {}\n".to_owned();
    }
    out
}

/// A YAML double-quoted scalar: nothing a collector reported can break out of it.
fn yaml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
