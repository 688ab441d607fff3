//! What a budget watches besides its thresholds, and where its alerts go: its channels, idle
//! slices, and days that cost a multiple of the usual.

use rust_decimal::Decimal;

use super::channel::{self, Channel, ChannelInput};
use super::store::BudgetRow;
use crate::domain::fields::FieldError;

/// The most whole days a slice may be watched for idling.
pub const MAX_IDLE_DAYS: i64 = 31;

/// Where a budget's alerts go and what it watches besides its thresholds. Each field left out
/// keeps what the budget has (none, for a new one): channel URLs are never shown back, so a client
/// that reads a budget and writes it again must not lose them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watch {
    pub channels: Option<Vec<Channel>>,
    /// A slice held this many whole days with no compute.
    pub idle_days: Option<Option<i16>>,
    /// A day costing more than this many times the trailing median day.
    pub spend_change: Option<Option<Decimal>>,
}

impl Watch {
    /// Checks `channels`, `idle_days` (1 to 31) and `spend_change` (a decimal above 1, at most
    /// 100), naming each bad field; each `None` is left out, each `Some(None)` cleared.
    pub fn parse(
        channels: Option<&[ChannelInput]>,
        idle_days: Option<Option<i64>>,
        spend_change: Option<Option<&str>>,
    ) -> Result<Watch, Vec<FieldError>> {
        let mut errors = Vec::new();
        let channels = channels.map(|list| {
            if list.len() > channel::MAX_CHANNELS {
                errors.push(FieldError::new(
                    "channels",
                    format!("a budget has at most {} channels", channel::MAX_CHANNELS),
                ));
            }
            let mut out: Vec<Channel> = Vec::new();
            for (i, c) in list.iter().enumerate() {
                match Channel::parse(i, c) {
                    Ok(c) if out.contains(&c) => errors.push(FieldError::new(
                        format!("channels[{i}]"),
                        "the same channel twice",
                    )),
                    Ok(c) => out.push(c),
                    Err(e) => errors.extend(e),
                }
            }
            out
        });
        let idle_days = idle_days.map(|d| {
            d.and_then(|d| match i16::try_from(d) {
                Ok(d) if (1..=MAX_IDLE_DAYS).contains(&i64::from(d)) => Some(d),
                _ => {
                    errors.push(FieldError::new(
                        "idle_days",
                        format!("{d} is not a number of days from 1 to {MAX_IDLE_DAYS}"),
                    ));
                    None
                }
            })
        });
        let spend_change = spend_change.map(|k| {
            k.and_then(|k| match k.parse::<Decimal>() {
                Ok(d) if d > Decimal::ONE && d <= Decimal::from(100) && d.scale() <= 2 => {
                    Some(d.normalize())
                }
                _ => {
                    errors.push(FieldError::new(
                        "spend_change",
                        format!("{k:?} is not a factor above 1 and at most 100 (\"2.5\")"),
                    ));
                    None
                }
            })
        });
        if errors.is_empty() {
            Ok(Watch {
                channels,
                idle_days,
                spend_change,
            })
        } else {
            Err(errors)
        }
    }

    /// What the budget watches once this is applied to `before` (a new budget's: nothing).
    pub(super) fn resolve(
        &self,
        before: Option<&BudgetRow>,
    ) -> (Vec<Channel>, Option<i16>, Option<Decimal>) {
        (
            self.channels
                .clone()
                .unwrap_or_else(|| before.map(BudgetRow::channels).unwrap_or_default()),
            self.idle_days
                .unwrap_or_else(|| before.and_then(|b| b.idle_days)),
            self.spend_change
                .unwrap_or_else(|| before.and_then(|b| b.spend_change)),
        )
    }
}
