//! What the `dcgm` source and `import prometheus` could not read, and why: each refusal names its
//! series; said once in the log per series and reason, and counted by reason.

use std::collections::HashSet;

/// Why a series, or what it names, was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refused {
    /// The line is not Prometheus' text format.
    Unparsable,
    /// A figure that is not a number the card can have (negative, NaN, infinite, past the card).
    BadValue,
    /// A label too long, not UTF-8 text, or not what its name says.
    BadLabel,
    /// No `UUID`.
    NoUuid,
    /// No `Hostname` or `hostname`, where no node is known.
    NoNode,
    /// Another node's series, on a node's own page.
    OtherNode,
    /// No `modelName`.
    NoModel,
    /// A model whose memory is not known.
    UnknownModel,
    /// A MIG profile not in NVIDIA's tables for the model.
    UnknownProfile,
    /// More consumers on a device than it has places for.
    SharedDevice,
}

impl Refused {
    pub const ALL: [Refused; 10] = [
        Refused::Unparsable,
        Refused::BadValue,
        Refused::BadLabel,
        Refused::NoUuid,
        Refused::NoNode,
        Refused::OtherNode,
        Refused::NoModel,
        Refused::UnknownModel,
        Refused::UnknownProfile,
        Refused::SharedDevice,
    ];

    /// Its name on the `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Unparsable => "unparsable",
            Refused::BadValue => "bad_value",
            Refused::BadLabel => "bad_label",
            Refused::NoUuid => "no_uuid",
            Refused::NoNode => "no_node",
            Refused::OtherNode => "other_node",
            Refused::NoModel => "no_model",
            Refused::UnknownModel => "unknown_model",
            Refused::UnknownProfile => "unknown_profile",
            Refused::SharedDevice => "shared_device",
        }
    }
}

/// A series (or device) not read, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: Refused,
    /// The series as a log line shows it (cut), or the device.
    pub series: String,
    pub detail: String,
}

/// Says refusals: each a log line the first time its series and reason are seen (a page refused
/// every few seconds would otherwise fill the log), and every one counted.
#[derive(Debug, Default)]
pub struct Refusals {
    said: HashSet<(Refused, String)>,
}

impl Refusals {
    /// Every reason's counter at zero, so that a scrape of the collector shows each from the start.
    pub fn register_metrics() {
        for r in Refused::ALL {
            metrics::counter!("slicemeter_collector_dcgm_refused_total", "reason" => r.as_str())
                .increment(0);
        }
        for r in ScrapeFailure::ALL {
            metrics::counter!("slicemeter_collector_dcgm_scrape_failures_total", "reason" => r.as_str())
                .increment(0);
        }
    }

    pub fn say(&mut self, refused: impl IntoIterator<Item = Refusal>) {
        for r in refused {
            metrics::counter!("slicemeter_collector_dcgm_refused_total", "reason" => r.reason.as_str())
                .increment(1);
            if self.said.len() > 10_000 {
                self.said.clear();
            }
            if self.said.insert((r.reason, r.series.clone())) {
                tracing::warn!(reason = r.reason.as_str(), series = %r.series, detail = %r.detail, "A dcgm-exporter series was not read.");
            }
        }
    }
}

/// Why a scrape brought no page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrapeFailure {
    Timeout,
    Connect,
    Status,
    TooLarge,
}

impl ScrapeFailure {
    pub const ALL: [ScrapeFailure; 4] = [
        ScrapeFailure::Timeout,
        ScrapeFailure::Connect,
        ScrapeFailure::Status,
        ScrapeFailure::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScrapeFailure::Timeout => "timeout",
            ScrapeFailure::Connect => "connect",
            ScrapeFailure::Status => "status",
            ScrapeFailure::TooLarge => "too_large",
        }
    }
}
