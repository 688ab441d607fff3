//! `Exact` against `BigRational` itself, and the rounding DESIGN.md asks for.

use rust_decimal_macros::dec;

use super::*;

#[test]
fn a_midpoint_rounds_to_the_even_cent() {
    assert_eq!(Exact::from(dec!(14.645)).round(2), dec!(14.64));
    assert_eq!(Exact::from(dec!(693.225)).round(2), dec!(693.22));
    assert_eq!(Exact::from(dec!(14.655)).round(2), dec!(14.66));
    assert_eq!(Exact::from(dec!(-14.645)).round(2), dec!(-14.64));
    assert_eq!(Exact::from(dec!(-14.655)).round(2), dec!(-14.66));
    assert_eq!(Exact::from(dec!(2.5)).round(0), dec!(2));
}

#[test]
fn sql_rounding_takes_a_midpoint_away_from_zero() {
    // As PostgreSQL's round(numeric, 9): 0.0000000025 is 0.000000003, where money's rounding gives
    // the even 0.000000002.
    let at9 = |d: Decimal| Exact::from(d).round_half_away(9);
    assert_eq!(at9(dec!(0.0000000025)), dec!(0.000000003));
    assert_eq!(at9(dec!(0.0000000015)), dec!(0.000000002));
    assert_eq!(at9(dec!(-0.0000000025)), dec!(-0.000000003));
    assert_eq!(at9(dec!(12.3456789125)), dec!(12.345678913));
    assert_eq!(at9(dec!(12.34567891249)), dec!(12.345678912));
    assert_eq!(at9(dec!(-12.34567891251)), dec!(-12.345678913));
    assert_eq!(at9(dec!(7)), dec!(7));
    // A seventh is no midpoint: 0.142857142|857... rounds up either way.
    assert_eq!(Exact::ratio(1, 7).round_half_away(9), dec!(0.142857143));
    assert_eq!(Exact::ratio(1, 8).round_half_away(2), dec!(0.13));
    assert_eq!(Exact::ratio(-1, 8).round_half_away(2), dec!(-0.13));
}

#[test]
fn a_seventh_is_exact_where_its_decimal_is_not() {
    // 102.515 x 1/7 x 7 is 102.515 exactly: a midpoint; its 28-digit decimal is not.
    let seventh = Exact::ratio(1, 7);
    let x = &(&seventh * dec!(102.515)) * Exact::from(7);
    assert_eq!(x.round(2), dec!(102.52));
    let y = &(&seventh * dec!(14.645)) * Exact::from(7);
    assert_eq!(y.round(2), dec!(14.64));
    let cut = Decimal::ONE / dec!(7) * dec!(7);
    assert_ne!(cut, Decimal::ONE, "a decimal cannot hold a seventh");
    assert_eq!(Exact::ratio(1, 7) * Exact::from(7), Exact::from(1));
}

#[test]
fn a_share_stored_to_28_places_comes_back_as_its_fraction() {
    for (n, d) in [(1, 7), (3, 7), (6, 7), (5, 8), (1, 3)] {
        let stored = Decimal::from(n) / Decimal::from(d);
        assert_eq!(Exact::share(stored), Exact::ratio(n, d), "{n}/{d}");
    }
    // Pinned bytes over an H100's: a denominator of 5.3e9 after reduction.
    let gpu = 85_520_809_984i64;
    let pinned = 20i64 << 30;
    let stored = Decimal::from(pinned) / Decimal::from(gpu);
    assert_eq!(Exact::share(stored), Exact::ratio(pinned, gpu));
    // Written-out decimals are taken as written.
    assert_eq!(Exact::share(dec!(0.333)), Exact::ratio(333, 1000));
    assert_eq!(Exact::share(dec!(0.25)), Exact::ratio(1, 4));
}

#[test]
fn long_sums_parse_exactly() {
    assert_eq!(
        Exact::parse("123456789012345678901234567890.125"),
        Some(
            Exact::from(123_456_789_012_345_678i64) * Exact::from(1_000_000_000_000i64)
                + Exact::from(901_234_567_890i64)
                + Exact::ratio(1, 8)
        )
    );
    assert_eq!(Exact::parse("-0.5"), Some(Exact::ratio(-1, 2)));
    assert_eq!(Exact::parse("1e5"), None);
    assert_eq!(Exact::parse(""), None);
}

#[test]
fn to_decimal_keeps_28_digits() {
    assert_eq!(Exact::ratio(1, 8).to_decimal(), dec!(0.125));
    assert_eq!(Exact::ratio(2, 3).to_decimal(), dec!(2) / dec!(3));
    assert_eq!(
        (Exact::from(dec!(1000)) * Exact::ratio(1, 7)).to_decimal(),
        dec!(142.8571428571428571428571429)
    );
}

/// A figure's big-integer twin, and the same figure reached through `Exact`'s own steps.
fn figures(seed: &mut u64) -> Vec<(BigRational, Exact)> {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let dens = [
        1i64,
        7,
        100,
        3600,
        10_000,
        85_520_809_984,
        1 << 40,
        999_999_937,
    ];
    (0..40)
        .map(|_| {
            let n = (next() % 2_000_000_001) as i64 - 1_000_000_000;
            let d = dens[(next() % dens.len() as u64) as usize];
            let mut big = BigRational::new(BigInt::from(n), BigInt::from(d));
            let mut exact = Exact::ratio(n, d);
            // Some figures grown past i128 and back: products of large fractions.
            for _ in 0..(next() % 6) {
                let m = (next() >> 2) as i64 | 1;
                let q = dens[(next() % dens.len() as u64) as usize];
                big *= BigRational::new(BigInt::from(m), BigInt::from(q));
                exact = exact * Exact::ratio(m, q);
            }
            (big, exact)
        })
        .collect()
}

fn reference_decimal(x: &BigRational, places: u32) -> Decimal {
    decimal_of(&round_big(x, places, Tie::Even), places)
}

#[test]
fn the_i128_path_agrees_with_big_fractions_in_every_step() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut smalls = 0;
    for _ in 0..8 {
        let xs = figures(&mut seed);
        for (rx, x) in &xs {
            assert_eq!(&x.to_big(), rx);
            if rx.numer().to_i128().is_some() && rx.denom().to_i128().is_some() {
                smalls += 1;
                assert!(matches!(x.0, Repr::Small(..)), "{rx} is kept small");
            }
            for places in [0, 2, 6, 9] {
                assert_eq!(
                    x.round(places),
                    reference_decimal(rx, places),
                    "{rx} at {places}"
                );
            }
            let whole = rx.abs().to_integer();
            let digits = if whole.is_zero() {
                0
            } else {
                whole.to_string().len() as u32
            };
            assert_eq!(
                x.to_decimal(),
                reference_decimal(rx, MAX_SCALE.saturating_sub(digits)).normalize(),
                "{rx}"
            );
            for (ry, y) in &xs {
                assert_eq!((x + y).to_big(), rx + ry, "{rx} + {ry}");
                assert_eq!((x - y).to_big(), rx - ry, "{rx} - {ry}");
                assert_eq!((x * y).to_big(), rx * ry, "{rx} x {ry}");
                if !ry.is_zero() {
                    assert_eq!((x / y).to_big(), rx / ry, "{rx} / {ry}");
                }
                assert_eq!(x.cmp(y), rx.cmp(ry), "{rx} against {ry}");
                assert_eq!(x == y, rx == ry);
                assert_eq!(Exact::of_big(rx + ry), x + y, "one form per value");
            }
        }
    }
    assert!(smalls > 100, "the figures reach both paths: {smalls} small");
}

#[test]
fn shares_cut_to_28_places_come_back_the_same_either_way() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let d = (seed % ((1 << 46) - 2)) as i64 + 2;
        let n = ((seed >> 17) as i64 % d).max(1);
        let stored = Decimal::from(n) / Decimal::from(d);
        let fast = Exact::share(stored);
        assert_eq!(fast, Exact::ratio(n, d), "{n}/{d} stored as {stored}");
        if stored.scale() > WRITTEN_PLACES {
            let x = Exact::from_decimal(stored).to_big();
            let half = BigRational::new(BigInt::from(5), ten_pow(MAX_SCALE + 1));
            assert_eq!(fast.to_big(), simplest_between(&x - &half, &x + &half));
        }
    }
}

#[test]
fn the_greatest_common_divisor_is_euclids_whatever_the_operands_widths() {
    fn euclid(mut a: u128, mut b: u128) -> u128 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let ten28 = 10u128.pow(28);
    let mut pairs = vec![
        (0, 0),
        (0, 7),
        (7, 0),
        (3600, ten28),
        (ten28, 3600),
        (ten28, ten28 / 8),
        (u128::MAX, u128::from(u64::MAX)),
        (u128::from(u64::MAX) + 1, 1 << 70),
    ];
    for _ in 0..20_000 {
        let wide = |x: u64, y: u64, shift: u32| (u128::from(x) << shift) | u128::from(y);
        let (a, b) = (next(), next());
        let shift = (next() % 65) as u32;
        // A common factor, so that the answer is seldom 1.
        let f = u128::from(next() % 10_000 + 1);
        pairs.push((u128::from(a) * f, wide(b, a, shift).wrapping_mul(f)));
        pairs.push((u128::from(a >> (next() % 64)), u128::from(b)));
    }
    for (a, b) in pairs {
        assert_eq!(gcd(a, b), euclid(a, b), "gcd({a}, {b})");
    }
}
