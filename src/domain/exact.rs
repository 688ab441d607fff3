//! Exact amounts: fractions over the inputs, which are all rational (decimal prices, weights and
//! factors, integer slices and seconds, decimal figures), rounded once, half to even, by
//! [`Exact::round`], the one place a money figure is rounded.
//!
//! `rust_decimal` holds what is stored and shown; it cannot hold a share of 1/7, whose 28-digit
//! decimal lands a hair off the fraction, and on a line whose exact amount is a half cent that hair
//! picks the other cent. So a figure that a decimal may not hold exactly is an [`Exact`] until it is
//! rounded, and a share stored as a decimal comes back as its fraction ([`Exact::share`]).

use std::cmp::Ordering;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use rust_decimal::Decimal;

/// An exact rational amount.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Exact(BigRational);

/// Decimal's largest scale: a quotient that does not terminate is cut there.
const MAX_SCALE: u32 = 28;

fn ten_pow(n: u32) -> BigInt {
    BigInt::from(10).pow(n)
}

impl Default for Exact {
    fn default() -> Self {
        Exact::zero()
    }
}

impl Exact {
    pub fn zero() -> Exact {
        Exact(BigRational::zero())
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    pub fn is_negative(&self) -> bool {
        self.0.is_negative()
    }

    /// `n / d`; `d` must not be zero.
    pub fn ratio(n: i64, d: i64) -> Exact {
        Exact(BigRational::new(BigInt::from(n), BigInt::from(d)))
    }

    /// The decimal's value, exactly.
    pub fn from_decimal(d: Decimal) -> Exact {
        Exact(BigRational::new(
            BigInt::from(d.mantissa()),
            ten_pow(d.scale()),
        ))
    }

    /// A decimal number written out (`"-12.5"`, `"3"`), exactly: for sums too long for a
    /// [`Decimal`]. `None` if it is not one.
    pub fn parse(s: &str) -> Option<Exact> {
        let s = s.trim();
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let all = format!("{int}{frac}");
        if all.is_empty() || !all.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let m: BigInt = all.parse().ok()?;
        let v = BigRational::new(m, ten_pow(frac.len() as u32));
        Some(Exact(if negative { -v } else { v }))
    }

    /// A share (a slice's compute or memory fraction of its GPU) as stored: its fraction.
    ///
    /// Shares are `slices / 7`, `percent / 100`, `pinned bytes / GPU bytes` or a decimal fraction
    /// as given, so their denominators are below 2^48. A decimal at scale 28 is such a fraction cut
    /// to 28 places (a quotient that terminates stops earlier): the fraction is the one of smallest
    /// denominator within half a unit of its last place, unique because two fractions with
    /// denominators below 2^48 differ by more than 10^-29. Any other decimal is exact as written.
    pub fn share(d: Decimal) -> Exact {
        if d.scale() < MAX_SCALE || d.is_zero() {
            return Exact::from_decimal(d);
        }
        let x = Exact::from_decimal(d).0;
        let half = BigRational::new(BigInt::from(5), ten_pow(MAX_SCALE + 1));
        let (lo, hi) = (&x - &half, &x + &half);
        if lo.is_negative() {
            return Exact(x);
        }
        Exact(simplest_between(lo, hi))
    }

    /// Rounded to `places` decimals, half to even: the one rounding of a money figure (and of any
    /// figure shown at a fixed number of places).
    pub fn round(&self, places: u32) -> Decimal {
        let n = self.round_to_integer_at(places);
        decimal_of(&n, places)
    }

    /// The nearest decimal with up to 28 significant digits (half to even): how an exact figure is
    /// stored or shown unrounded (an invoice line's `exact_amount`).
    pub fn to_decimal(&self) -> Decimal {
        let whole = self.0.abs().to_integer();
        let int_digits = if whole.is_zero() {
            0
        } else {
            whole.to_string().len() as u32
        };
        let places = MAX_SCALE.saturating_sub(int_digits);
        self.round(places).normalize()
    }

    fn round_to_integer_at(&self, places: u32) -> BigInt {
        let scaled = &self.0 * BigRational::from_integer(ten_pow(places));
        let floor = scaled.floor();
        let frac = &scaled - &floor;
        let floor = floor.to_integer();
        match frac.cmp(&BigRational::new(BigInt::one(), BigInt::from(2))) {
            Ordering::Less => floor,
            Ordering::Greater => floor + 1,
            Ordering::Equal if (&floor % 2u8).is_zero() => floor,
            Ordering::Equal => floor + 1,
        }
    }
}

/// `n / 10^places` as a decimal; figures this large are not money (saturates at Decimal's range).
fn decimal_of(n: &BigInt, places: u32) -> Decimal {
    match n.to_i128() {
        Some(m) => Decimal::try_from_i128_with_scale(m, places).unwrap_or_else(|_| {
            if places > 0 {
                // Too many digits for 96 bits: drop places (half to even) until it fits.
                decimal_of(
                    &Exact(BigRational::new(n.clone(), BigInt::from(10))).round_to_integer_at(0),
                    places - 1,
                )
            } else if m < 0 {
                Decimal::MIN
            } else {
                Decimal::MAX
            }
        }),
        None if n.is_negative() => Decimal::MIN,
        None => Decimal::MAX,
    }
}

/// The fraction of smallest denominator in `[lo, hi]`, `0 <= lo <= hi`.
fn simplest_between(lo: BigRational, hi: BigRational) -> BigRational {
    let fl = lo.floor();
    if fl == lo {
        return lo;
    }
    let next = &fl + BigRational::one();
    if next <= hi {
        return next;
    }
    // Both within (fl, fl + 1): continue on the reciprocals of what is left.
    let inner = simplest_between((&hi - &fl).recip(), (&lo - &fl).recip());
    fl + inner.recip()
}

impl From<Decimal> for Exact {
    fn from(d: Decimal) -> Exact {
        Exact::from_decimal(d)
    }
}

impl From<i64> for Exact {
    fn from(n: i64) -> Exact {
        Exact(BigRational::from_integer(BigInt::from(n)))
    }
}

macro_rules! binary {
    ($trait:ident, $method:ident, $op:tt) => {
        impl $trait<&Exact> for &Exact {
            type Output = Exact;
            fn $method(self, o: &Exact) -> Exact {
                Exact(&self.0 $op &o.0)
            }
        }
        impl $trait<Exact> for Exact {
            type Output = Exact;
            fn $method(self, o: Exact) -> Exact {
                Exact(self.0 $op o.0)
            }
        }
        impl $trait<Exact> for &Exact {
            type Output = Exact;
            fn $method(self, o: Exact) -> Exact {
                Exact(&self.0 $op o.0)
            }
        }
        impl $trait<&Exact> for Exact {
            type Output = Exact;
            fn $method(self, o: &Exact) -> Exact {
                Exact(self.0 $op &o.0)
            }
        }
        impl $trait<Decimal> for &Exact {
            type Output = Exact;
            fn $method(self, o: Decimal) -> Exact {
                Exact(&self.0 $op Exact::from_decimal(o).0)
            }
        }
        impl $trait<Decimal> for Exact {
            type Output = Exact;
            fn $method(self, o: Decimal) -> Exact {
                Exact(self.0 $op Exact::from_decimal(o).0)
            }
        }
    };
}
binary!(Add, add, +);
binary!(Sub, sub, -);
binary!(Mul, mul, *);
binary!(Div, div, /);

impl AddAssign<&Exact> for Exact {
    fn add_assign(&mut self, o: &Exact) {
        self.0 += &o.0;
    }
}

impl AddAssign<Exact> for Exact {
    fn add_assign(&mut self, o: Exact) {
        self.0 += o.0;
    }
}

impl Neg for Exact {
    type Output = Exact;
    fn neg(self) -> Exact {
        Exact(-self.0)
    }
}

impl Sum for Exact {
    fn sum<I: Iterator<Item = Exact>>(it: I) -> Exact {
        it.fold(Exact::zero(), |a, b| a + b)
    }
}

impl<'a> Sum<&'a Exact> for Exact {
    fn sum<I: Iterator<Item = &'a Exact>>(it: I) -> Exact {
        it.fold(Exact::zero(), |a, b| a + b)
    }
}

#[cfg(test)]
mod tests {
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
}
