//! Numbers as people read them: currency and thousands separators, ISO dates, and "unknown" where a
//! figure could not be measured.

use rust_decimal::Decimal;

/// `1234567.891` with `dp` decimals -> `1,234,567.89`.
pub fn number(d: Decimal, dp: u32) -> String {
    let mut r = d.round_dp_with_strategy(dp, rust_decimal::RoundingStrategy::MidpointNearestEven);
    r.rescale(dp);
    if r.is_zero() {
        r.set_sign_positive(true);
    }
    let text = r.abs().to_string();
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::with_capacity(text.len() + int.len() / 3 + 1);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if r.is_sign_negative() { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// `USD 1,337.14`.
pub fn money(amount: Decimal, currency: &str, minor_units: u32) -> String {
    format!("{currency} {}", number(amount, minor_units))
}

/// `38.5 %`, or `unknown` when the GPU could not measure it.
pub fn percent(ratio: Option<Decimal>) -> String {
    match ratio {
        Some(r) => format!("{} %", number(r * Decimal::ONE_HUNDRED, 1)),
        None => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn figures_read_with_separators_currency_and_unknowns() {
        assert_eq!(number(dec!(1234567.891), 2), "1,234,567.89");
        assert_eq!(number(dec!(999), 0), "999");
        assert_eq!(number(dec!(-1000.5), 1), "-1,000.5");
        assert_eq!(number(dec!(-0.001), 2), "0.00");
        assert_eq!(money(dec!(1337.14), "USD", 2), "USD 1,337.14");
        assert_eq!(money(dec!(2500), "JPY", 0), "JPY 2,500");
        assert_eq!(percent(Some(dec!(0.3846))), "38.5 %");
        assert_eq!(percent(None), "unknown");
    }
}
