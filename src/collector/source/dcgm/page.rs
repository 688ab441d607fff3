//! A page in Prometheus' text format, as NVIDIA's dcgm-exporter serves it, read into the few series
//! slicemeter bills from ([`Metric`]). Lines are parsed one at a time with `nom-openmetrics`, so a
//! line that is not the format is refused alone (and said, with the line) while the rest of the
//! page is read; families slicemeter does not read are skipped by name before any parsing.

use super::refusal::{Refusal, Refused};

/// A dcgm-exporter field slicemeter reads, under its name there (case-insensitive: the exporter's
/// `-o` compatibility mode writes them in lower case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Frame buffer used, MiB: per MIG instance on a MIG GPU, else per GPU.
    FbUsed,
    /// Frame buffer free, MiB (with used and reserved, the card's memory).
    FbFree,
    /// Frame buffer reserved by the driver, MiB.
    FbReserved,
    /// Ratio of time the graphics engine was active (0-1), per MIG instance or GPU.
    EngineActive,
    /// Percent of time a kernel ran (0-100); whole GPUs only.
    GpuUtil,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Metric::FbUsed,
        Metric::FbFree,
        Metric::FbReserved,
        Metric::EngineActive,
        Metric::GpuUtil,
    ];

    /// The series' name, as dcgm-exporter writes it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::FbUsed => "DCGM_FI_DEV_FB_USED",
            Metric::FbFree => "DCGM_FI_DEV_FB_FREE",
            Metric::FbReserved => "DCGM_FI_DEV_FB_RESERVED",
            Metric::EngineActive => "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            Metric::GpuUtil => "DCGM_FI_DEV_GPU_UTIL",
        }
    }

    pub fn of_name(name: &str) -> Option<Metric> {
        Metric::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }
}

/// One series of a page and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub metric: Metric,
    /// Its labels, in page order; a label with an empty value is no label (as in Prometheus).
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// The series as a log line shows it: its name and labels, each value cut to 80 characters.
    pub fn describe(&self) -> String {
        describe(self.metric.name(), &self.labels)
    }
}

/// `name{k="v",...}`, each value cut to 80 characters, for log lines.
pub fn describe(name: &str, labels: &[(String, String)]) -> String {
    let mut out = String::with_capacity(64 + 24 * labels.len());
    out.push_str(name);
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&cut(k, 80));
        out.push_str("=\"");
        out.push_str(&cut(v, 80));
        out.push('"');
    }
    out.push('}');
    out
}

/// At most `max` characters of `s`, with how much was left out.
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((at, _)) => format!("{}… ({} bytes)", &s[..at], s.len()),
    }
}

/// The longest label value read; longer ones are refused with their series (Kubernetes names are
/// at most 253 characters, GPU models and uuids far less).
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;

/// Reads the series slicemeter uses from `page` into `out`; lines it cannot read are refused into
/// `refused`, each with the line.
pub fn read(page: &str, out: &mut Vec<Series>, refused: &mut Vec<Refusal>) {
    for line in page.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let name_end = trimmed
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(trimmed.len());
        let Some(metric) = Metric::of_name(&trimmed[..name_end]) else {
            continue;
        };
        match series(trimmed, metric) {
            Ok(s) => out.push(s),
            Err((reason, detail)) => refused.push(Refusal {
                reason,
                series: cut(trimmed, 300),
                detail,
            }),
        }
    }
}

fn series(line: &str, metric: Metric) -> Result<Series, (Refused, String)> {
    // Infinities are refused without the parser, which prints a line to stderr for each.
    let value_token = line.rsplit(['}', ' ']).next().unwrap_or_default();
    if value_token.to_ascii_lowercase().contains("inf") {
        return Err((Refused::BadValue, format!("{value_token} is not finite")));
    }
    let with_newline;
    let input = if line.ends_with('\n') {
        line
    } else {
        with_newline = format!("{line}\n");
        &with_newline
    };
    let family = match nom_openmetrics::parser::family(input) {
        Ok(("", f)) => f,
        Ok((rest, _)) => {
            return Err((
                Refused::Unparsable,
                format!("text after the value: {}", cut(rest.trim_end(), 60)),
            ));
        }
        Err(e) => {
            return Err((
                Refused::Unparsable,
                format!("not Prometheus' text format ({})", cut(&e.to_string(), 120)),
            ));
        }
    };
    let Some(sample) = family.samples.into_iter().next() else {
        return Err((Refused::Unparsable, "no sample on the line".into()));
    };
    let mut labels = Vec::with_capacity(sample.labels().len());
    for l in sample.labels() {
        if l.value.len() > MAX_LABEL_VALUE_BYTES {
            return Err((
                Refused::BadLabel,
                format!(
                    "label {} is {} bytes long, more than {MAX_LABEL_VALUE_BYTES}",
                    cut(l.name, 80),
                    l.value.len()
                ),
            ));
        }
        labels.push((l.name.to_owned(), l.value.clone()));
    }
    Ok(Series {
        metric,
        labels,
        value: sample.number(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_slicemeter_bills_from_are_read_with_their_labels_and_the_rest_skipped() {
        let page = "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n\
# TYPE DCGM_FI_DEV_FB_USED gauge\n\
DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"n1\",pod=\"p\"} 40536\n\
# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n\
DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-a\"} 1410\n\
dcgm_fi_prof_gr_engine_active{gpu=\"0\",uuid=\"GPU-a\",pod_name=\"p\"} 0.412000\r\n\
DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\",note=\"a \\\"quoted\\\" value\"} 1.5e3";
        let (mut out, mut refused) = (Vec::new(), Vec::new());
        read(page, &mut out, &mut refused);
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[0].metric, Metric::FbUsed);
        assert_eq!(out[0].value, 40536.0);
        assert_eq!(out[0].label("UUID"), Some("GPU-a"));
        assert_eq!(out[0].label("modelName"), Some("NVIDIA A100-SXM4-80GB"));
        assert_eq!(out[0].label("pci_bus_id"), None, "empty is no label");
        assert_eq!(out[1].metric, Metric::EngineActive);
        assert_eq!(out[1].value, 0.412);
        assert_eq!(out[2].value, 1500.0);
        assert_eq!(out[2].label("note"), Some("a \"quoted\" value"));
    }

    #[test]
    fn a_bad_line_is_refused_alone_with_the_line_and_the_rest_is_read() {
        let long = "x".repeat(100_000);
        let page = format!(
            "DCGM_FI_DEV_FB_USED{{UUID=\"GPU-a\"}} 1\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-b\" 2\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-c\"}} +Inf\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-d\",pod=\"{long}\"}} 3\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-e\"}} 4 garbage\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-f\"}} NaN\n\
\u{0}\u{1}binary junk\n\
DCGM_FI_DEV_FB_USED{{UUID=\"GPU-g\"}} 5\n"
        );
        let (mut out, mut refused) = (Vec::new(), Vec::new());
        read(&page, &mut out, &mut refused);
        let read: Vec<_> = out.iter().map(|s| s.label("UUID").unwrap()).collect();
        // NaN is read here and refused where figures are checked (`read`), with the device known.
        assert_eq!(read, ["GPU-a", "GPU-f", "GPU-g"]);
        let reasons: Vec<_> = refused.iter().map(|r| r.reason).collect();
        assert_eq!(
            reasons,
            [
                Refused::Unparsable,
                Refused::BadValue,
                Refused::BadLabel,
                Refused::Unparsable
            ]
        );
        assert!(refused[0].series.contains("GPU-b"), "{refused:?}");
        assert!(refused[2].detail.contains("100000 bytes"), "{refused:?}");
        assert!(refused[2].series.len() < 1_000, "the log line is cut");
    }
}
