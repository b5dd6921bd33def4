//! The MD5 digests SQS returns with messages, which the SDKs verify.
//!
//! Invariant: `attributes_md5` encodes the attributes exactly as SQS
//! specifies (names sorted; per attribute: 4-byte big-endian length and the
//! name, 4-byte length and the data type, one transport byte (1 string or
//! number, 2 binary), 4-byte length and the value), so a client computing the
//! digest from what it sent or received gets the same hex string.

use std::collections::BTreeMap;

use md5::{Digest, Md5};

use crate::envelope::{AttributeValue, MessageAttribute};

/// Lowercase hex MD5 of the body (`MD5OfMessageBody`, `MD5OfBody`).
pub(crate) fn body_md5(body: &str) -> String {
    hex::encode(Md5::digest(body.as_bytes()))
}

/// `MD5OfMessageAttributes` of `attributes` (a `BTreeMap`, so already sorted
/// by name); `None` when there are none, as SQS then omits the field.
pub(crate) fn attributes_md5(attributes: &BTreeMap<String, MessageAttribute>) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut hasher = Md5::new();
    for (name, attribute) in attributes {
        length_prefixed(&mut hasher, name.as_bytes());
        length_prefixed(&mut hasher, attribute.data_type.as_bytes());
        match &attribute.value {
            AttributeValue::String(s) => {
                hasher.update([1]);
                length_prefixed(&mut hasher, s.as_bytes());
            }
            AttributeValue::Binary(b) => {
                hasher.update([2]);
                length_prefixed(&mut hasher, b);
            }
        }
    }
    Some(hex::encode(hasher.finalize()))
}

fn length_prefixed(hasher: &mut Md5, bytes: &[u8]) {
    // Lengths fit in u32: every field is bounded by the message size limit.
    hasher.update((bytes.len() as u32).to_be_bytes());
    hasher.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_digest_is_hex_md5() {
        assert_eq!(body_md5(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(body_md5("hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn attribute_digest_follows_the_sqs_encoding() {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "b".to_string(),
            MessageAttribute { data_type: "Binary".into(), value: AttributeValue::Binary(vec![0, 1]) },
        );
        attributes.insert(
            "a".to_string(),
            MessageAttribute { data_type: "String".into(), value: AttributeValue::String("x".into()) },
        );
        // The same bytes written out by hand, names in sorted order.
        let mut expected = Vec::new();
        for (name, ty, transport, value) in [("a", "String", 1u8, &b"x"[..]), ("b", "Binary", 2, &[0, 1][..])] {
            expected.extend((name.len() as u32).to_be_bytes());
            expected.extend(name.as_bytes());
            expected.extend((ty.len() as u32).to_be_bytes());
            expected.extend(ty.as_bytes());
            expected.push(transport);
            expected.extend((value.len() as u32).to_be_bytes());
            expected.extend(value);
        }
        assert_eq!(attributes_md5(&attributes), Some(hex::encode(Md5::digest(&expected))));
        assert_eq!(attributes_md5(&BTreeMap::new()), None);
    }
}
