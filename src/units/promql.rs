//! What a unit definition's PromQL expression must be before it is stored: not longer than
//! [`MAX_EXPRESSION`], its strings closed and brackets balanced, naming a series, and no range or
//! subquery reaching over [`MAX_RANGE_DAYS`] days (`rate(x[32d])`, `x[32d:5m]`): the expression is
//! sent only to the configured Prometheus, whose cost this keeps bounded. Not a full PromQL parser:
//! Prometheus itself refuses what is wrong in other ways, and its message names the query. A bare
//! selector's matchers are read here too ([`matchers`]): remote read takes them, not PromQL.

use crate::collector::import::prometheus::remote_read::{MatchKind, Matcher};

/// The longest expression stored, in characters.
pub const MAX_EXPRESSION: usize = 2000;
/// The longest range or subquery an expression may hold.
pub const MAX_RANGE_DAYS: i64 = 31;

/// A PromQL duration (`90s`, `1h30m`, `2w`) in milliseconds; none for anything else.
pub fn duration_ms(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            let ms = match rest.bytes().next()? {
                b's' => 1_000,
                b'm' => 60_000,
                b'h' => 3_600_000,
                b'd' => 86_400_000,
                b'w' => 7 * 86_400_000,
                b'y' => 365 * 86_400_000,
                _ => return None,
            };
            (ms, 1)
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = &rest[len..];
    }
    Some(total)
}

/// What is wrong with `expr`, each thing once, in the order found; empty when it may be stored.
pub fn problems(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = expr.trim();
    if trimmed.is_empty() {
        return vec![
            "the expression is empty; give a counter, e.g. vllm:generation_tokens_total".into(),
        ];
    }
    let chars = expr.chars().count();
    if chars > MAX_EXPRESSION {
        return vec![format!(
            "the expression is {chars} characters long; at most {MAX_EXPRESSION}"
        )];
    }
    if expr
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        out.push("the expression holds control characters".into());
    }
    let mut stack: Vec<char> = Vec::new();
    let mut range = String::new();
    let mut in_range = false;
    let mut names_series = false;
    let mut chars = expr.chars().peekable();
    let mut too_long = false;
    let mut bad_range = None;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let mut closed = false;
                while let Some(d) = chars.next() {
                    if d == '\\' && c != '`' {
                        chars.next();
                    } else if d == c {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    out.push(format!("a string opened with {c} is not closed"));
                    return out;
                }
            }
            '#' => {
                // A comment, to the end of the line.
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '(' | '{' => {
                if c == '{' {
                    names_series = true;
                }
                stack.push(c);
            }
            '[' => {
                stack.push(c);
                in_range = true;
                range.clear();
            }
            ')' | '}' | ']' => {
                let open = match c {
                    ')' => '(',
                    '}' => '{',
                    _ => '[',
                };
                if stack.pop() != Some(open) {
                    out.push(format!("{c} closes nothing that was opened"));
                    return out;
                }
                if c == ']' {
                    in_range = false;
                    let text: String = range.chars().filter(|c| !c.is_whitespace()).collect();
                    let (span, step) = match text.split_once(':') {
                        Some((span, step)) => (span.to_owned(), Some(step.to_owned())),
                        None => (text.clone(), None),
                    };
                    match duration_ms(&span) {
                        Some(ms) if ms > MAX_RANGE_DAYS * 86_400_000 => too_long = true,
                        Some(0) | None => {
                            bad_range.get_or_insert(format!(
                                "[{text}] is not a range (e.g. [5m] or [1h:1m])"
                            ));
                        }
                        Some(_) => {}
                    }
                    if let Some(step) = step
                        && !step.is_empty()
                        && duration_ms(&step).is_none()
                    {
                        bad_range.get_or_insert(format!("[{text}] has no valid subquery step"));
                    }
                }
            }
            c if in_range => range.push(c),
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                names_series = true;
            }
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        out.push(format!("{open} is opened and never closed"));
    }
    if !names_series {
        out.push(
            "the expression names no series; give a counter, e.g. vllm:generation_tokens_total"
                .into(),
        );
    }
    if let Some(bad) = bad_range {
        out.push(bad);
    }
    if too_long {
        out.push(format!(
            "a range or subquery reaches over {MAX_RANGE_DAYS} days; at most [{MAX_RANGE_DAYS}d]"
        ));
    }
    out
}

/// Whether `expr` is a bare series selector (`name{matchers}`), which a range selector can follow
/// as it is; anything else is read through a subquery.
pub fn is_selector(expr: &str) -> bool {
    let e = expr.trim();
    let name_len = e
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
        .count();
    let rest = &e[name_len..];
    if name_len == 0 && !rest.starts_with('{') {
        return false;
    }
    if rest.is_empty() {
        return !e.chars().next().is_some_and(|c| c.is_ascii_digit());
    }
    // One matcher block, ending the expression, with no brackets but its own outside strings.
    if !(rest.starts_with('{') && rest.ends_with('}')) {
        return false;
    }
    let mut in_string = None;
    let mut depth = 0;
    let mut escaped = false;
    for c in rest.chars() {
        if let Some(q) = in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                in_string = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => in_string = Some(c),
            '{' => depth += 1,
            '}' => depth -= 1,
            '(' | ')' | '[' | ']' => return false,
            _ => {}
        }
    }
    depth == 0 && in_string.is_none()
}

/// The matchers of a bare selector (`name{label="v", other=~"re"}`; the name as `__name__="name"`),
/// as the remote read API takes them; `None` for anything else, or a selector whose strings use
/// escapes other than `\\`, `\"`, `\'`, `\n`, `\t` and `\r`, or whose label names are quoted: those
/// are read through the query API, which parses them itself.
pub fn matchers(expr: &str) -> Option<Vec<Matcher>> {
    if !is_selector(expr) {
        return None;
    }
    let e = expr.trim();
    let name_len = e
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(e.len());
    let mut out = Vec::new();
    if name_len > 0 {
        out.push(Matcher {
            kind: MatchKind::Equal,
            name: "__name__".into(),
            value: e[..name_len].into(),
        });
    }
    let Some(inner) = e[name_len..]
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
    else {
        return Some(out);
    };
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let label_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        if label_len == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let name = &rest[..label_len];
        rest = rest[label_len..].trim_start();
        let (kind, after) = [
            ("=~", MatchKind::Regex),
            ("!~", MatchKind::NotRegex),
            ("!=", MatchKind::NotEqual),
            ("=", MatchKind::Equal),
        ]
        .into_iter()
        .find_map(|(op, kind)| rest.strip_prefix(op).map(|after| (kind, after)))?;
        let (value, after) = string(after.trim_start())?;
        out.push(Matcher {
            kind,
            name: name.into(),
            value,
        });
        rest = after.trim_start();
        rest = match rest.strip_prefix(',') {
            Some(r) => r.trim_start(),
            None if rest.is_empty() => rest,
            None => return None,
        };
    }
    Some(out)
}

/// A PromQL string at the start of `s` (double, single or back quotes) and what follows it.
fn string(s: &str) -> Option<(String, &str)> {
    let quote = s.chars().next().filter(|c| matches!(c, '"' | '\'' | '`'))?;
    let mut out = String::new();
    let mut chars = s[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c == quote => return Some((out, &s[1 + i + 1..])),
            '\\' if quote != '`' => out.push(match chars.next()?.1 {
                '\\' => '\\',
                '"' => '"',
                '\'' => '\'',
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                _ => return None,
            }),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_prometheus_writes_them() {
        assert_eq!(duration_ms("90s"), Some(90_000));
        assert_eq!(duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(duration_ms("250ms"), Some(250));
        assert_eq!(duration_ms("31d"), Some(31 * 86_400_000));
        assert_eq!(duration_ms("5"), None);
        assert_eq!(duration_ms("5x"), None);
        assert_eq!(duration_ms(""), None);
    }

    #[test]
    fn counters_and_bounded_ranges_pass() {
        for ok in [
            "vllm:generation_tokens_total",
            r#"vllm:prompt_tokens_total{job="vllm", model_name=~"llama.*"}"#,
            "sum by (namespace, pod, model) (nv_inference_count)",
            "max_over_time(x[31d:1h])",
            r#"x{a="]["}"#,
        ] {
            assert_eq!(problems(ok), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn long_ranges_subqueries_and_broken_expressions_are_refused() {
        assert_eq!(
            problems("max_over_time(rate(x[5m])[32d:5m])"),
            vec!["a range or subquery reaches over 31 days; at most [31d]"]
        );
        assert_eq!(
            problems("rate(x[5w])"),
            vec!["a range or subquery reaches over 31 days; at most [31d]"]
        );
        assert_eq!(problems("x[1y:]").len(), 1);
        assert_eq!(problems("sum(x"), vec!["( is opened and never closed"]);
        assert_eq!(
            problems(r#"x{a="b}"#),
            vec!["a string opened with \" is not closed"]
        );
        assert_eq!(problems("x)"), vec![") closes nothing that was opened"]);
        assert_eq!(
            problems("42"),
            vec![
                "the expression names no series; give a counter, e.g. vllm:generation_tokens_total"
            ]
        );
        assert_eq!(problems(&"x".repeat(2001)).len(), 1);
        assert_eq!(
            problems("x[abc]"),
            vec!["[abc] is not a range (e.g. [5m] or [1h:1m])"]
        );
    }

    #[test]
    fn selectors_are_told_from_other_expressions() {
        assert!(is_selector("vllm:generation_tokens_total"));
        assert!(is_selector(r#"vllm:generation_tokens_total{job="a(b)"}"#));
        assert!(is_selector(r#"{__name__="x"}"#));
        assert!(!is_selector("sum(x)"));
        assert!(!is_selector("x + y"));
        assert!(!is_selector("x[5m]"));
    }

    #[test]
    fn a_selectors_matchers_are_read_as_prometheus_reads_them() {
        let m = |kind, name: &str, value: &str| Matcher {
            kind,
            name: name.into(),
            value: value.into(),
        };
        assert_eq!(
            matchers("vllm:generation_tokens_total").unwrap(),
            [m(
                MatchKind::Equal,
                "__name__",
                "vllm:generation_tokens_total"
            )]
        );
        assert_eq!(
            matchers(r#" tgi_x{ job = "a(b)\"c", model_name=~'llama.*' ,pod!~`x\y`, ns!="" } "#)
                .unwrap(),
            [
                m(MatchKind::Equal, "__name__", "tgi_x"),
                m(MatchKind::Equal, "job", "a(b)\"c"),
                m(MatchKind::Regex, "model_name", "llama.*"),
                m(MatchKind::NotRegex, "pod", "x\\y"),
                m(MatchKind::NotEqual, "ns", ""),
            ]
        );
        assert_eq!(
            matchers(r#"{__name__="x",}"#).unwrap(),
            [m(MatchKind::Equal, "__name__", "x")]
        );
        // Not a selector, an escape left to Prometheus, a quoted label name, a missing comma.
        for e in [
            "sum(x)",
            r#"x{a="\u00e9"}"#,
            r#"{"a"="b"}"#,
            r#"x{a="b" c="d"}"#,
            r#"x{a}"#,
        ] {
            assert_eq!(matchers(e), None, "{e}");
        }
    }
}
