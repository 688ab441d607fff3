//! Where a budget's alerts go: a webhook (signed, see `alerts::deliver`), a Slack-compatible
//! incoming webhook, or an email address. A channel's URL is a secret of its own (a Slack
//! webhook's path is its credential), so answers and the audit log show it [`Channel::redacted`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::fields::FieldError;

/// The most channels a budget has.
pub const MAX_CHANNELS: usize = 5;
/// The longest URL or address a channel takes.
const MAX_TARGET: usize = 2048;

/// A channel as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Channel {
    Webhook { url: String },
    Slack { url: String },
    Email { to: String },
}

/// A channel as sent, before it is checked.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelInput {
    /// `webhook` (JSON, signed with HMAC-SHA256), `slack` (an incoming-webhook URL) or `email`.
    #[serde(rename = "type")]
    #[schema(example = "webhook", pattern = "^(webhook|slack|email)$")]
    pub kind: String,
    /// With `webhook` and `slack`: an `http` or `https` URL.
    #[schema(example = "https://alerts.example.com/slicemeter")]
    pub url: Option<String>,
    /// With `email`: the address.
    #[schema(example = "nlp-lead@example.com")]
    pub to: Option<String>,
}

/// A channel as answers show it: its URL cut to the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ChannelView {
    #[serde(rename = "type")]
    #[schema(example = "slack")]
    pub kind: String,
    /// The URL's scheme, host and port (its path and query, often a secret, are not shown), or
    /// the email address.
    #[schema(example = "https://hooks.slack.com/…")]
    pub target: String,
}

impl Channel {
    pub fn kind(&self) -> &'static str {
        match self {
            Channel::Webhook { .. } => "webhook",
            Channel::Slack { .. } => "slack",
            Channel::Email { .. } => "email",
        }
    }

    /// The channel without its secret part.
    pub fn redacted(&self) -> ChannelView {
        let target = match self {
            Channel::Webhook { url } | Channel::Slack { url } => match reqwest::Url::parse(url) {
                Ok(u) => {
                    let origin = u.origin().ascii_serialization();
                    if u.path() == "/" && u.query().is_none() {
                        origin
                    } else {
                        format!("{origin}/…")
                    }
                }
                Err(_) => "(not a URL)".into(),
            },
            Channel::Email { to } => to.clone(),
        };
        ChannelView {
            kind: self.kind().into(),
            target,
        }
    }

    /// Checks `input` (the budget's `channels[i]`), naming each bad field.
    pub fn parse(i: usize, input: &ChannelInput) -> Result<Channel, Vec<FieldError>> {
        let field = |name: &str| format!("channels[{i}].{name}");
        let mut errors = Vec::new();
        let url = |errors: &mut Vec<FieldError>| -> Option<String> {
            if input.to.is_some() {
                errors.push(FieldError::new(
                    field("to"),
                    "only an email channel has `to`",
                ));
            }
            let Some(url) = &input.url else {
                errors.push(FieldError::new(
                    field("url"),
                    format!("a {} channel needs its url", input.kind),
                ));
                return None;
            };
            match reqwest::Url::parse(url) {
                Ok(u)
                    if matches!(u.scheme(), "http" | "https")
                        && u.host().is_some()
                        && u.username().is_empty()
                        && u.password().is_none()
                        && url.len() <= MAX_TARGET =>
                {
                    Some(u.to_string())
                }
                _ => {
                    errors.push(FieldError::new(
                        field("url"),
                        format!(
                            "not an http or https URL with a host and no user, of at most {MAX_TARGET} characters"
                        ),
                    ));
                    None
                }
            }
        };
        let channel = match input.kind.as_str() {
            "webhook" => url(&mut errors).map(|url| Channel::Webhook { url }),
            "slack" => url(&mut errors).map(|url| Channel::Slack { url }),
            "email" => {
                if input.url.is_some() {
                    errors.push(FieldError::new(
                        field("url"),
                        "an email channel has `to`, not `url`",
                    ));
                }
                match &input.to {
                    None => {
                        errors.push(FieldError::new(
                            field("to"),
                            "an email channel needs its address",
                        ));
                        None
                    }
                    Some(to) => match to.parse::<lettre::Address>() {
                        Ok(a) if to.len() <= MAX_TARGET => {
                            Some(Channel::Email { to: a.to_string() })
                        }
                        _ => {
                            errors.push(FieldError::new(
                                field("to"),
                                format!("{to:?} is not an email address"),
                            ));
                            None
                        }
                    },
                }
            }
            other => {
                errors.push(FieldError::new(
                    field("type"),
                    format!("{other:?} is none of webhook, slack, email"),
                ));
                None
            }
        };
        match channel {
            Some(c) if errors.is_empty() => Ok(c),
            _ => Err(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(kind: &str, url: Option<&str>, to: Option<&str>) -> ChannelInput {
        ChannelInput {
            kind: kind.into(),
            url: url.map(Into::into),
            to: to.map(Into::into),
        }
    }

    #[test]
    fn a_channel_is_a_url_for_webhooks_and_slack_and_an_address_for_email() {
        assert_eq!(
            Channel::parse(
                0,
                &input(
                    "slack",
                    Some("https://hooks.slack.com/services/T0/B0/xyz"),
                    None
                )
            ),
            Ok(Channel::Slack {
                url: "https://hooks.slack.com/services/T0/B0/xyz".into()
            })
        );
        assert_eq!(
            Channel::parse(0, &input("email", None, Some("lead@example.com"))),
            Ok(Channel::Email {
                to: "lead@example.com".into()
            })
        );
        let names = |r: Result<Channel, Vec<FieldError>>| -> Vec<String> {
            r.unwrap_err().into_iter().map(|f| f.field).collect()
        };
        assert_eq!(
            names(Channel::parse(
                2,
                &input("webhook", Some("ftp://x/"), Some("a@b.c"))
            )),
            vec!["channels[2].to", "channels[2].url"]
        );
        assert_eq!(
            names(Channel::parse(
                0,
                &input("webhook", Some("https://user:pw@x.example/"), None)
            )),
            vec!["channels[0].url"]
        );
        assert_eq!(
            names(Channel::parse(
                1,
                &input("email", None, Some("not an address"))
            )),
            vec!["channels[1].to"]
        );
        assert_eq!(
            names(Channel::parse(0, &input("pager", None, None))),
            vec!["channels[0].type"]
        );
    }

    #[test]
    fn answers_show_a_url_only_to_its_origin() {
        let slack = Channel::Slack {
            url: "https://hooks.slack.com/services/T0/B0/secret".into(),
        };
        assert_eq!(slack.redacted().target, "https://hooks.slack.com/…");
        let hook = Channel::Webhook {
            url: "http://127.0.0.1:9000/".into(),
        };
        assert_eq!(hook.redacted().target, "http://127.0.0.1:9000");
    }
}
