//! Key derivation (stream-format.md §1): the Philox key of a parameter is the first 8 bytes,
//! little-endian, of `SHA-256(b"shardinit-v1\0" || u64_le(seed) || utf8(name))`.

use sha2::{Digest, Sha256};

use crate::Error;

/// Domain-separation prefix of stream format v1.
pub const KEY_DOMAIN_V1: &[u8] = b"shardinit-v1\x00";

/// The 64-bit key of parameter `name` under `seed` (stream-format.md §1).
///
/// # Errors
/// [`Error::EmptyName`] if `name` is empty: every parameter has a non-empty canonical
/// name, and an empty one is almost always a bug in the caller's naming.
///
/// ```
/// // stream-format.md §6 golden value.
/// assert_eq!(shardinit_core::key64(0, "w").unwrap(), 0x47a94443d83ccf19);
/// ```
pub fn key64(seed: u64, name: &str) -> Result<u64, Error> {
    if name.is_empty() {
        return Err(Error::EmptyName);
    }
    let mut hasher = Sha256::new();
    hasher.update(KEY_DOMAIN_V1);
    hasher.update(seed.to_le_bytes());
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut first8 = [0u8; 8];
    first8.copy_from_slice(&digest[..8]);
    Ok(u64::from_le_bytes(first8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_golden_keys() {
        // stream-format.md §6, computed independently of this project.
        assert_eq!(key64(0, "w").unwrap(), 0x47a9_4443_d83c_cf19);
        assert_eq!(
            key64(u64::MAX, "layers.0.attention.wq.weight").unwrap(),
            0x6b59_ead9_09d7_045b
        );
    }

    #[test]
    fn empty_name_is_refused() {
        assert_eq!(key64(0, ""), Err(Error::EmptyName));
    }

    #[test]
    fn neighbouring_names_and_seeds_give_different_keys() {
        let keys = [
            key64(0, "w").unwrap(),
            key64(1, "w").unwrap(),
            key64(0, "w2").unwrap(),
            key64(0, "W").unwrap(),
        ];
        for i in 0..keys.len() {
            for j in i + 1..keys.len() {
                assert_ne!(keys[i], keys[j]);
            }
        }
    }
}
