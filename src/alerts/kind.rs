//! The words an alert row holds: its kind and each delivery's state, as stored and shown.

use serde::Serialize;

/// What an alert is about: a threshold on spent (`actual`) or forecast crossed, a slice held
/// idle, a day's spend jumping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    Actual,
    Forecast,
    Idle,
    SpendChange,
}

impl AlertKind {
    pub const ALL: [AlertKind; 4] = [
        AlertKind::Actual,
        AlertKind::Forecast,
        AlertKind::Idle,
        AlertKind::SpendChange,
    ];

    /// As stored in `alert.kind` and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Actual => "actual",
            AlertKind::Forecast => "forecast",
            AlertKind::Idle => "idle",
            AlertKind::SpendChange => "spend_change",
        }
    }

    pub fn parse(s: &str) -> Result<AlertKind, String> {
        AlertKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not an alert kind (actual, forecast, idle, spend_change)")
            })
    }
}

/// A stored kind is read as one: an unknown word is an error.
impl TryFrom<String> for AlertKind {
    type Error = String;
    fn try_from(s: String) -> Result<AlertKind, String> {
        AlertKind::parse(&s)
    }
}

impl std::fmt::Display for AlertKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where an alert's delivery to one channel stands: to be sent (or retried), sent, or given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] = [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ];

    /// As stored in `alert_delivery.state` and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Result<DeliveryState, String> {
        DeliveryState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a delivery state (pending, delivered, failed)"))
    }
}

/// A stored state is read as one: an unknown word is an error.
impl TryFrom<String> for DeliveryState {
    type Error = String;
    fn try_from(s: String) -> Result<DeliveryState, String> {
        DeliveryState::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_states_read_back_as_written_and_refuse_other_words() {
        for k in AlertKind::ALL {
            assert_eq!(AlertKind::parse(k.as_str()), Ok(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for d in DeliveryState::ALL {
            assert_eq!(DeliveryState::parse(d.as_str()), Ok(d));
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
        assert_eq!(AlertKind::SpendChange.as_str(), "spend_change");
        assert!(AlertKind::parse("Idle").is_err());
        assert!(AlertKind::parse("").is_err());
        assert!(DeliveryState::parse("sent").is_err());
    }
}
