// SPDX-License-Identifier: MIT OR Apache-2.0
//! PCI ids in JSON as `lspci` writes them, hexadecimal strings (`"0x10de"`), for fleets that
//! grep for them; numbers (what releases before issue 46 wrote) are read too, so a saved
//! `check --json` is still judged by `--facts`.

use serde::{de, Deserialize, Deserializer, Serializer};

/// `#[serde(with = "crate::hexid::u16")]`: `"0x10de"`.
pub mod u16 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &::core::primitive::u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#06x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<::core::primitive::u16, D::Error> {
        let v = super::any(d)?;
        ::core::primitive::u16::try_from(v).map_err(de::Error::custom)
    }
}

/// `#[serde(with = "crate::hexid::u32")]` (a class code): `"0x030200"`.
pub mod u32 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &::core::primitive::u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#08x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<::core::primitive::u32, D::Error> {
        let v = super::any(d)?;
        ::core::primitive::u32::try_from(v).map_err(de::Error::custom)
    }
}

/// A number, or a string of hexadecimal digits with or without `0x`.
fn any<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(u64),
        Text(String),
    }
    match Id::deserialize(d)? {
        Id::Number(n) => Ok(n),
        Id::Text(t) => crate::host::pci::parse_hex(&t, u64::MAX)
            .ok_or_else(|| de::Error::custom(format!("{t:?} is not a hexadecimal PCI id"))),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Ids {
        #[serde(with = "crate::hexid::u16")]
        vendor: u16,
        #[serde(with = "crate::hexid::u32")]
        class: u32,
    }

    #[test]
    fn hex_strings_out_numbers_or_strings_in() {
        let ids = Ids {
            vendor: 0x10de,
            class: 0x030200,
        };
        let text = serde_json::to_string(&ids).unwrap();
        assert_eq!(text, r#"{"vendor":"0x10de","class":"0x030200"}"#);
        assert_eq!(serde_json::from_str::<Ids>(&text).unwrap(), ids);
        let old: Ids = serde_json::from_str(r#"{"vendor":4318,"class":197120}"#).unwrap();
        assert_eq!(old, ids);
        assert!(serde_json::from_str::<Ids>(r#"{"vendor":"zz","class":1}"#).is_err());
        assert!(serde_json::from_str::<Ids>(r#"{"vendor":70000,"class":1}"#).is_err());
    }
}
