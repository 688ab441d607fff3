//! Prometheus' XOR chunks (`tsdb/chunkenc/xor.go`, Gorilla's encoding): a chunk's samples read
//! through a big-endian bit stream, each read bounds-checked (a chunk that stops short is "cut
//! off", never a panic); staleness markers left out, as the query API leaves them out.

/// The value Prometheus writes when a series goes stale (`value.StaleNaN`).
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// A big-endian bit stream (Prometheus' `bstream`), read through a 64-bit window.
struct Bits<'a> {
    data: &'a [u8],
    /// The next byte of `data` to load into the window.
    next: usize,
    /// The window: its low `valid` bits are the next to read, the highest of them first.
    window: u64,
    valid: u32,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8]) -> Bits<'a> {
        Bits {
            data,
            next: 0,
            window: 0,
            valid: 0,
        }
    }

    /// Bits read so far.
    fn read(&self) -> usize {
        self.next * 8 - self.valid as usize
    }

    /// Loads whole bytes into the window while they fit.
    fn fill(&mut self) {
        while self.valid <= 56 {
            let Some(b) = self.data.get(self.next) else {
                return;
            };
            self.window = (self.window << 8) | u64::from(*b);
            self.valid += 8;
            self.next += 1;
        }
    }

    fn bit(&mut self) -> Option<bool> {
        Some(self.bits(1)? == 1)
    }

    /// The next `n` bits (at most 64) as a number.
    fn bits(&mut self, n: u32) -> Option<u64> {
        if n > self.valid {
            self.fill();
        }
        if n <= self.valid {
            self.valid -= n;
            let v = if n == 64 {
                self.window
            } else {
                (self.window >> self.valid) & ((1u64 << n) - 1)
            };
            return Some(v);
        }
        // More than the window holds after a fill (n > 56 with bits pending): in two reads.
        if n > 32 && self.read() + n as usize <= self.data.len() * 8 {
            let high = self.bits(n - 32)?;
            let low = self.bits(32)?;
            return Some((high << 32) | low);
        }
        None
    }
}

/// The samples of an XOR chunk (`tsdb/chunkenc/xor.go`) with a timestamp in `[from_ms, to_ms)`,
/// staleness markers left out, added to `out`.
pub(super) fn xor_samples(
    data: &[u8],
    from_ms: i64,
    to_ms: i64,
    out: &mut Vec<(i64, f64)>,
) -> Result<(), &'static str> {
    let cut = "cut off";
    let Some((count, stream)) = data.split_first_chunk::<2>() else {
        return Err("without its sample count");
    };
    let count = u16::from_be_bytes(*count);
    let mut push = |t: i64, v: u64| {
        if t >= from_ms && t < to_ms && v != STALE_NAN {
            out.push((t, f64::from_bits(v)));
        }
    };
    if count == 0 {
        return Ok(());
    }
    // The first time (zig-zag), value and time delta are whole bytes, as Go writes them
    // (`binary.PutVarint`, 64 bits, `binary.PutUvarint`); the rest a bit stream.
    let mut rest = stream;
    let zigzag = prost::encoding::decode_varint(&mut rest).map_err(|_| cut)?;
    let mut t = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
    let (first, after) = rest.split_first_chunk::<8>().ok_or(cut)?;
    let mut v = u64::from_be_bytes(*first);
    rest = after;
    push(t, v);
    let mut delta: i64 = 0;
    if count > 1 {
        delta = prost::encoding::decode_varint(&mut rest).map_err(|_| cut)? as i64;
    }
    let mut r = Bits::new(rest);
    let (mut leading, mut trailing) = (0xffu32, 0u32);
    for i in 1..count {
        if i > 1 {
            let mut d = 0u8;
            for _ in 0..4 {
                d <<= 1;
                if !r.bit().ok_or(cut)? {
                    break;
                }
                d |= 1;
            }
            let signed = |bits: u64, size: u32| -> i64 {
                if bits > 1 << (size - 1) {
                    bits as i64 - (1i64 << size)
                } else {
                    bits as i64
                }
            };
            let dod = match d {
                0 => 0,
                0b10 => signed(r.bits(14).ok_or(cut)?, 14),
                0b110 => signed(r.bits(17).ok_or(cut)?, 17),
                0b1110 => signed(r.bits(20).ok_or(cut)?, 20),
                _ => r.bits(64).ok_or(cut)? as i64,
            };
            delta = delta.wrapping_add(dod);
        }
        t = t.wrapping_add(delta);
        // The value: unchanged (0), its XOR with the last leading and trailing zeros (10), or with
        // new ones (11: 5 bits of leading zeros, 6 of significant bits, 0 meaning 64).
        if r.bit().ok_or(cut)? {
            if r.bit().ok_or(cut)? {
                let lead = r.bits(5).ok_or(cut)? as u32;
                let mut significant = r.bits(6).ok_or(cut)? as u32;
                if significant == 0 {
                    significant = 64;
                }
                if lead + significant > 64 {
                    return Err("with more than 64 bits in a value");
                }
                leading = lead;
                trailing = 64 - lead - significant;
            } else if leading == 0xff {
                return Err("reusing leading zeros before any were given");
            }
            let bits = r.bits(64 - leading - trailing).ok_or(cut)?;
            v ^= bits << trailing;
        }
        push(t, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_read_through_the_window_are_the_bits_read_one_by_one() {
        let data: Vec<u8> = (0..40u32).map(|i| (i * 37 + 11) as u8).collect();
        // The reference: bit i of the stream is bit 7 - i % 8 of byte i / 8.
        let bit = |i: usize| u64::from((data[i / 8] >> (7 - i % 8)) & 1);
        let mut r = Bits::new(&data);
        let mut at = 0;
        for n in [1, 3, 12, 64, 5, 6, 64, 17, 20, 8, 64, 2, 14, 33] {
            let want = (at..at + n).fold(0u64, |v, i| (v << 1) | bit(i));
            assert_eq!(r.bits(n as u32), Some(want), "{n} bits at {at}");
            at += n;
            assert_eq!(r.read(), at);
        }
        // 320 bits in all, 7 left: 8 are refused without reading any, then the 7 read.
        assert_eq!(at, 313);
        assert_eq!(r.bits(8), None);
        assert_eq!(r.bits(7).map(|v| v & 1), Some(bit(319)));
    }

    #[test]
    fn a_chunk_whose_samples_stop_short_is_cut_off() {
        // Three samples announced, the first's time given, its value missing.
        assert_eq!(
            xor_samples(&[0, 3, 2], 0, 10, &mut Vec::new()),
            Err("cut off")
        );
        // None announced: nothing read.
        let mut out = Vec::new();
        assert_eq!(xor_samples(&[0, 0], 0, 10, &mut out), Ok(()));
        assert!(out.is_empty());
    }
}
