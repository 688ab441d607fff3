//! Exact amounts: fractions over the inputs, which are all rational (decimal prices, weights and
//! factors, integer slices and seconds, decimal figures), rounded once, half to even, by
//! [`Exact::round`], the one place a money figure is rounded.
//!
//! `rust_decimal` holds what is stored and shown; it cannot hold a share of 1/7, whose 28-digit
//! decimal lands a hair off the fraction, and on a line whose exact amount is a half cent that hair
//! picks the other cent. So a figure that a decimal may not hold exactly is an [`Exact`] until it is
//! rounded, and a share stored as a decimal comes back as its fraction ([`Exact::share`]).
//!
//! Almost every figure here is a fraction whose numerator and denominator fit 128 bits (decimal
//! prices over 10^k, shares over 7, 100 or a GPU's bytes, seconds over 3,600): those are computed
//! in `i128`, every step checked, and a step that would overflow is done again in `BigRational`,
//! which holds any fraction. The result is the same either way; only the time differs (an export
//! prices each of its rows, and big-integer fractions cost it twice the time of the whole read).

use std::cmp::Ordering;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use rust_decimal::Decimal;

/// An exact rational amount.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Exact(Repr);

/// One representation per value, so that equality and hashing may compare representations: a
/// fraction whose reduced numerator and denominator fit `i128` is always `Small`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `n / d`, reduced, `d > 0`.
    Small(i128, i128),
    /// Any other fraction (reduced, as `BigRational` keeps it).
    Big(BigRational),
}

/// Decimal's largest scale: a quotient that does not terminate is cut there.
const MAX_SCALE: u32 = 28;

/// The most places a share is written with by hand (`0.333`, a vGPU fraction): a share with more is
/// a quotient cut at [`MAX_SCALE`].
const WRITTEN_PLACES: u32 = 20;

fn ten_pow(n: u32) -> BigInt {
    BigInt::from(10).pow(n)
}

/// `10^k` for `k <= 38`.
fn ten_pow_small(k: u32) -> i128 {
    10i128.pow(k)
}

/// The greatest common divisor, `gcd(0, b) = b`. Most operands here are a count or a decimal's
/// digits against a power of ten or another such figure: one remainder (Euclid's step) brings the
/// larger below the smaller, and the rest is done in one machine word rather than two.
fn gcd(a: u128, b: u128) -> u128 {
    let (mut small, mut large) = if a <= b { (a, b) } else { (b, a) };
    // Euclid's steps while both are wide (seldom more than one).
    while u64::try_from(small).is_err() {
        (small, large) = (large % small, small);
    }
    if small == 0 {
        return large;
    }
    let s = small as u64;
    let r = match u64::try_from(large) {
        Ok(l) => l % s,
        // Below `small`, so it fits.
        Err(_) => (large % small) as u64,
    };
    u128::from(gcd64(s, r))
}

/// [`gcd`] of two machine words (binary).
fn gcd64(a: u64, b: u64) -> u64 {
    if a == 0 {
        return b;
    }
    if b == 0 {
        return a;
    }
    let shift = (a | b).trailing_zeros();
    let (mut a, mut b) = (a >> a.trailing_zeros(), b);
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

/// `n / d` reduced, if it fits; `d` must not be zero.
fn small(n: i128, d: i128) -> Option<Exact> {
    assert!(d != 0, "an exact fraction's denominator is zero");
    let (n, d) = if d < 0 {
        (n.checked_neg()?, d.checked_neg()?)
    } else {
        (n, d)
    };
    // `d > 0`, so the divisor is at most `d` and fits `i128`.
    let g = gcd(n.unsigned_abs(), d as u128) as i128;
    Some(Exact(Repr::Small(n / g, d / g)))
}

impl Default for Exact {
    fn default() -> Self {
        Exact::zero()
    }
}

impl Exact {
    pub fn zero() -> Exact {
        Exact(Repr::Small(0, 1))
    }

    pub fn is_zero(&self) -> bool {
        match &self.0 {
            Repr::Small(n, _) => *n == 0,
            Repr::Big(b) => b.is_zero(),
        }
    }

    pub fn is_negative(&self) -> bool {
        match &self.0 {
            Repr::Small(n, _) => *n < 0,
            Repr::Big(b) => b.is_negative(),
        }
    }

    /// `n / d`; `d` must not be zero.
    pub fn ratio(n: i64, d: i64) -> Exact {
        small(i128::from(n), i128::from(d)).expect("an i64 fraction fits i128")
    }

    /// The decimal's value, exactly.
    pub fn from_decimal(d: Decimal) -> Exact {
        if d.scale() == 0 {
            return Exact(Repr::Small(d.mantissa(), 1));
        }
        // A mantissa of 96 bits over at most 10^28: both fit.
        small(d.mantissa(), ten_pow_small(d.scale())).expect("a decimal fits i128")
    }

    /// The canonical form of a big fraction.
    fn of_big(b: BigRational) -> Exact {
        match (b.numer().to_i128(), b.denom().to_i128()) {
            (Some(n), Some(d)) => Exact(Repr::Small(n, d)),
            _ => Exact(Repr::Big(b)),
        }
    }

    fn to_big(&self) -> BigRational {
        match &self.0 {
            Repr::Small(n, d) => BigRational::new_raw(BigInt::from(*n), BigInt::from(*d)),
            Repr::Big(b) => b.clone(),
        }
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
        Some(Exact::of_big(if negative { -v } else { v }))
    }

    /// A share (a slice's compute or memory fraction of its GPU) as stored: its fraction.
    ///
    /// Shares are `slices / 7`, `percent / 100`, `pinned bytes / GPU bytes` or a decimal fraction
    /// as given, so their denominators are below 2^46 (a GPU's bytes are below 2^38). A decimal at
    /// scale 28 is such a fraction cut to 28 places (a quotient that terminates stops earlier): the
    /// fraction is the one of smallest denominator within half a unit of its last place, unique
    /// because two fractions with denominators below 2^46 differ by at least 2^-92, more than the
    /// 10^-28 that the half units either side span. A quotient's trailing zeros are not kept
    /// (3/8 is 0.375, a quotient whose 28th place is 0 has 27 places), so any decimal with more than
    /// [`WRITTEN_PLACES`] places is taken as cut at 28; any other decimal is exact as written.
    pub fn share(d: Decimal) -> Exact {
        if d.scale() <= WRITTEN_PLACES || d.is_zero() {
            return Exact::from_decimal(d);
        }
        // Half a unit of the last place either side: (2m -+ 1) / (2 x 10^28).
        let m = d.mantissa() * ten_pow_small(MAX_SCALE - d.scale());
        if m < 0 {
            return Exact::from_decimal(d);
        }
        let unit = 2 * ten_pow_small(MAX_SCALE);
        if let Some((n, d)) = simplest_between_small((2 * m - 1, unit), (2 * m + 1, unit)) {
            return small(n, d).expect("a reduced share fits");
        }
        let x = Exact::from_decimal(d).to_big();
        let half = BigRational::new(BigInt::from(5), ten_pow(MAX_SCALE + 1));
        Exact::of_big(simplest_between(&x - &half, &x + &half))
    }

    /// Rounded to `places` decimals, half to even: the one rounding of a money figure (and of any
    /// figure shown at a fixed number of places).
    pub fn round(&self, places: u32) -> Decimal {
        self.round_ties(places, Tie::Even)
    }

    fn round_ties(&self, places: u32, tie: Tie) -> Decimal {
        if let Repr::Small(n, d) = self.0
            && let Some(m) = round_small(n, d, places, tie)
            && let Ok(x) = Decimal::try_from_i128_with_scale(m, places)
        {
            return x;
        }
        let n = round_big(&self.to_big(), places, tie);
        decimal_of(&n, places)
    }

    /// Rounded to `places` decimals half away from zero, as SQL's `round(numeric, int)` rounds: for
    /// a figure that must be, digit for digit, one a query rounds (never money, which rounds half
    /// to even, [`Exact::round`]).
    pub fn round_half_away(&self, places: u32) -> Decimal {
        self.round_ties(places, Tie::AwayFromZero)
    }

    /// The nearest decimal with up to 28 significant digits (half to even): how an exact figure is
    /// stored or shown unrounded (an invoice line's `exact_amount`).
    pub fn to_decimal(&self) -> Decimal {
        let int_digits = match &self.0 {
            Repr::Small(n, d) => {
                let whole = n.unsigned_abs() / (*d as u128);
                whole.checked_ilog10().map_or(0, |l| l + 1)
            }
            Repr::Big(b) => {
                let whole = b.abs().to_integer();
                if whole.is_zero() {
                    0
                } else {
                    whole.to_string().len() as u32
                }
            }
        };
        let places = MAX_SCALE.saturating_sub(int_digits);
        self.round(places).normalize()
    }
}

/// `n / d x 10^places` rounded half to even, if every step fits `i128`.
/// Where a figure halfway between two roundings goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tie {
    /// To the even one: money's rounding.
    Even,
    /// Away from zero: SQL's `round`.
    AwayFromZero,
}

fn round_small(n: i128, d: i128, places: u32, tie: Tie) -> Option<i128> {
    // Floor division, so that the remainder is never negative: n = q d + r, 0 <= r < d.
    let mut m = n.div_euclid(d);
    let mut r = n.rem_euclid(d);
    let mut left = places;
    while left > 0 {
        // As many digits at once as `r x 10^k` allows (r < d, so one digit at least unless d is
        // within a factor ten of i128's range).
        let mut k = left.min(18);
        let t = loop {
            match r.checked_mul(ten_pow_small(k)) {
                Some(t) => break t,
                None if k > 1 => k /= 2,
                None => return None,
            }
        };
        m = m.checked_mul(ten_pow_small(k))?.checked_add(t / d)?;
        r = t % d;
        left -= k;
    }
    // Twice the remainder against the denominator, without doubling: r against d - r.
    Some(match r.cmp(&(d - r)) {
        Ordering::Less => m,
        Ordering::Greater => m.checked_add(1)?,
        // `m` is the floor: below the figure, towards zero only when it is not negative.
        Ordering::Equal if tie == Tie::AwayFromZero && n < 0 => m,
        Ordering::Equal if tie == Tie::Even && m % 2 == 0 => m,
        Ordering::Equal => m.checked_add(1)?,
    })
}

fn round_big(x: &BigRational, places: u32, tie: Tie) -> BigInt {
    let scaled = x * BigRational::from_integer(ten_pow(places));
    let floor = scaled.floor();
    let frac = &scaled - &floor;
    let floor = floor.to_integer();
    match frac.cmp(&BigRational::new(BigInt::one(), BigInt::from(2))) {
        Ordering::Less => floor,
        Ordering::Greater => floor + 1,
        Ordering::Equal if tie == Tie::AwayFromZero && x.is_negative() => floor,
        Ordering::Equal if tie == Tie::Even && (&floor % 2u8).is_zero() => floor,
        Ordering::Equal => floor + 1,
    }
}

/// `n / 10^places` as a decimal; figures this large are not money (saturates at Decimal's range).
fn decimal_of(n: &BigInt, places: u32) -> Decimal {
    match n.to_i128() {
        Some(m) => Decimal::try_from_i128_with_scale(m, places).unwrap_or_else(|_| {
            if places > 0 {
                // Too many digits for 96 bits: drop places (half to even) until it fits.
                decimal_of(
                    &round_big(&BigRational::new(n.clone(), BigInt::from(10)), 0, Tie::Even),
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

/// [`simplest_between`] of `lo = (ln, ld)` and `hi = (hn, hd)` (positive denominators, not
/// necessarily reduced), if every step fits `i128`; the result is not reduced.
fn simplest_between_small(lo: (i128, i128), hi: (i128, i128)) -> Option<(i128, i128)> {
    let ((ln, ld), (hn, hd)) = (lo, hi);
    let fl = ln.div_euclid(ld);
    let lo_rest = ln.rem_euclid(ld);
    if lo_rest == 0 {
        return Some((fl, 1));
    }
    let next = fl.checked_add(1)?;
    if next.checked_mul(hd)? <= hn {
        return Some((next, 1));
    }
    // hi - fl and lo - fl, both in (0, 1): their reciprocals, the larger first.
    let hi_rest = hn.checked_sub(fl.checked_mul(hd)?)?;
    let (inner_n, inner_d) = simplest_between_small((hd, hi_rest), (ld, lo_rest))?;
    // fl + 1 / inner.
    Some((fl.checked_mul(inner_n)?.checked_add(inner_d)?, inner_n))
}

impl PartialOrd for Exact {
    fn partial_cmp(&self, o: &Exact) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Exact {
    fn cmp(&self, o: &Exact) -> Ordering {
        if let (Repr::Small(a, b), Repr::Small(c, d)) = (&self.0, &o.0) {
            if b == d {
                return a.cmp(c);
            }
            if let (Some(x), Some(y)) = (a.checked_mul(*d), c.checked_mul(*b)) {
                return x.cmp(&y);
            }
        }
        self.to_big().cmp(&o.to_big())
    }
}

impl From<Decimal> for Exact {
    fn from(d: Decimal) -> Exact {
        Exact::from_decimal(d)
    }
}

impl From<i64> for Exact {
    fn from(n: i64) -> Exact {
        Exact(Repr::Small(i128::from(n), 1))
    }
}

fn add(x: &Exact, y: &Exact) -> Exact {
    // Sums start at zero, and rows' figures are often zero.
    if x.is_zero() {
        return y.clone();
    }
    if y.is_zero() {
        return x.clone();
    }
    if let (Repr::Small(a, b), Repr::Small(c, d)) = (&x.0, &y.0) {
        let sum = if b == d {
            a.checked_add(*c).and_then(|n| small(n, *b))
        } else {
            let g = gcd(*b as u128, *d as u128) as i128;
            (|| {
                let n = a.checked_mul(d / g)?.checked_add(c.checked_mul(b / g)?)?;
                small(n, (b / g).checked_mul(*d)?)
            })()
        };
        if let Some(s) = sum {
            return s;
        }
    }
    Exact::of_big(x.to_big() + y.to_big())
}

fn neg(x: &Exact) -> Exact {
    match &x.0 {
        Repr::Small(n, d) => match n.checked_neg() {
            Some(n) => Exact(Repr::Small(n, *d)),
            None => Exact::of_big(-x.to_big()),
        },
        Repr::Big(b) => Exact::of_big(-b.clone()),
    }
}

fn sub(x: &Exact, y: &Exact) -> Exact {
    add(x, &neg(y))
}

fn mul(x: &Exact, y: &Exact) -> Exact {
    if let (Repr::Small(a, b), Repr::Small(c, d)) = (&x.0, &y.0) {
        // Reduced across first, so that the product is reduced and as small as it can be.
        let g1 = gcd(a.unsigned_abs(), *d as u128) as i128;
        let g2 = gcd(c.unsigned_abs(), *b as u128) as i128;
        if let (Some(n), Some(m)) = ((a / g1).checked_mul(c / g2), (b / g2).checked_mul(d / g1)) {
            return if n == 0 {
                Exact::zero()
            } else {
                Exact(Repr::Small(n, m))
            };
        }
    }
    Exact::of_big(x.to_big() * y.to_big())
}

fn div(x: &Exact, y: &Exact) -> Exact {
    assert!(!y.is_zero(), "an exact figure divided by zero");
    let recip = match &y.0 {
        Repr::Small(n, d) => small(*d, *n),
        Repr::Big(_) => None,
    };
    match recip {
        Some(r) => mul(x, &r),
        None => Exact::of_big(x.to_big() / y.to_big()),
    }
}

macro_rules! binary {
    ($trait:ident, $method:ident, $f:ident) => {
        impl $trait<&Exact> for &Exact {
            type Output = Exact;
            fn $method(self, o: &Exact) -> Exact {
                $f(self, o)
            }
        }
        impl $trait<Exact> for Exact {
            type Output = Exact;
            fn $method(self, o: Exact) -> Exact {
                $f(&self, &o)
            }
        }
        impl $trait<Exact> for &Exact {
            type Output = Exact;
            fn $method(self, o: Exact) -> Exact {
                $f(self, &o)
            }
        }
        impl $trait<&Exact> for Exact {
            type Output = Exact;
            fn $method(self, o: &Exact) -> Exact {
                $f(&self, o)
            }
        }
        impl $trait<Decimal> for &Exact {
            type Output = Exact;
            fn $method(self, o: Decimal) -> Exact {
                $f(self, &Exact::from_decimal(o))
            }
        }
        impl $trait<Decimal> for Exact {
            type Output = Exact;
            fn $method(self, o: Decimal) -> Exact {
                $f(&self, &Exact::from_decimal(o))
            }
        }
    };
}
binary!(Add, add, add);
binary!(Sub, sub, sub);
binary!(Mul, mul, mul);
binary!(Div, div, div);

impl AddAssign<&Exact> for Exact {
    fn add_assign(&mut self, o: &Exact) {
        *self = add(self, o);
    }
}

impl AddAssign<Exact> for Exact {
    fn add_assign(&mut self, o: Exact) {
        *self = add(self, &o);
    }
}

impl Neg for Exact {
    type Output = Exact;
    fn neg(self) -> Exact {
        neg(&self)
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
mod tests;
