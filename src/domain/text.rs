//! Rules for text that crosses the service's edges: what a collector may send (no control
//! characters, bounded lengths) and what a CSV cell may start with (no spreadsheet formulas).

/// Why a string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("is empty")]
    Empty,
    #[error("has {0} characters, more than the limit of {1}")]
    TooLong(usize, usize),
    #[error("contains a control character (U+{0:04X}); text must be printable")]
    Control(u32),
}

/// Checks that `s` has 1 to `max` characters and no control character (NUL, tab, newline, DEL and
/// the C1 range included): what every name, uuid and label in a batch must be.
pub fn check(s: &str, max: usize) -> Result<(), TextError> {
    if s.is_empty() {
        return Err(TextError::Empty);
    }
    check_optional(s, max)
}

/// Like [`check`], but an empty string is allowed.
pub fn check_optional(s: &str, max: usize) -> Result<(), TextError> {
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(TextError::Control(u32::from(c)));
    }
    let n = s.chars().count();
    if n > max {
        return Err(TextError::TooLong(n, max));
    }
    Ok(())
}

/// A text cell as it may go into a CSV that someone opens in a spreadsheet. A cell that starts with
/// `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to Excel, LibreOffice and Google
/// Sheets; OWASP's rule is to prefix it with a single quote, which the spreadsheet shows as text.
/// Numbers are never passed through here: `-12.50` stays a number.
///
/// Unicode's bidirectional controls (embeddings, overrides and isolates, U+202A-U+202E and
/// U+2066-U+2069, the marks U+200E, U+200F and U+061C) are dropped first: a pod named with a
/// right-to-left override would show reversed in the cell, and nothing in a name needs them.
pub fn spreadsheet_safe(cell: &str) -> std::borrow::Cow<'_, str> {
    // Every control is outside ASCII, which most cells are: a test of bytes, not of chars.
    let cell: std::borrow::Cow<'_, str> = if !cell.is_ascii() && cell.chars().any(is_bidi_control) {
        cell.chars()
            .filter(|c| !is_bidi_control(*c))
            .collect::<String>()
            .into()
    } else {
        cell.into()
    };
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{cell}").into(),
        _ => cell,
    }
}

/// A Unicode bidirectional formatting character: it reorders the text around it on screen.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

/// A name that is not one of a type's names (a status, a kind) read from outside.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{value:?} is not a known {what}: expected one of {expected}")]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
    pub expected: String,
}

impl UnknownName {
    /// The one of `all` named `s`.
    pub fn find<T: Copy>(
        what: &'static str,
        s: &str,
        all: &[T],
        name: impl Fn(T) -> &'static str,
    ) -> Result<T, UnknownName> {
        all.iter()
            .copied()
            .find(|t| name(*t) == s)
            .ok_or_else(|| UnknownName {
                what,
                value: s.to_owned(),
                expected: all.iter().map(|t| name(*t)).collect::<Vec<_>>().join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_printable_and_bounded() {
        assert_eq!(check("gpu-node-01", 253), Ok(()));
        assert_eq!(check("", 253), Err(TextError::Empty));
        assert_eq!(check("a\0b", 253), Err(TextError::Control(0)));
        assert_eq!(check("a\u{85}b", 253), Err(TextError::Control(0x85)));
        assert_eq!(check("tab\there", 253), Err(TextError::Control(9)));
        assert_eq!(
            check(&"x".repeat(254), 253),
            Err(TextError::TooLong(254, 253))
        );
        // Characters, not bytes: a 63-letter label value in Greek is fine.
        assert_eq!(check(&"λ".repeat(63), 63), Ok(()));
        assert_eq!(check_optional("", 63), Ok(()));
    }

    #[test]
    fn cells_that_a_spreadsheet_would_run_are_quoted() {
        for (cell, safe) in [
            ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
            ("+1", "'+1"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("nlp", "nlp"),
            ("", ""),
            ("a=b", "a=b"),
        ] {
            assert_eq!(spreadsheet_safe(cell), safe, "{cell:?}");
        }
    }

    #[test]
    fn bidirectional_controls_are_dropped_before_the_formula_guard() {
        for (cell, safe) in [
            ("train-\u{202E}gpj.exe", "train-gpj.exe"),
            ("\u{202E}=1+1", "'=1+1"),
            (
                "a\u{2066}b\u{2069}c\u{200E}d\u{200F}e\u{061C}f\u{202A}",
                "abcdef",
            ),
            ("שלום", "שלום"),
        ] {
            assert_eq!(spreadsheet_safe(cell), safe, "{cell:?}");
        }
    }
}
