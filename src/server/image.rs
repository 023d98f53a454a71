//! The image the container backend runs, and how `$ACKGAP_VALKEY_IMAGE`
//! names another. Apart from [`super::container`] so that a build without
//! the `container` feature (no testcontainers) still names it.

/// The image `ci/build-image` builds.
pub const VALKEY_IMAGE_NAME: &str = "ackgap/valkey";
/// Its tag: the valkey version inside.
pub const VALKEY_IMAGE_TAG: &str = "9.1.2";
/// The environment variable that overrides the image, as `name:tag`.
pub const IMAGE_ENV: &str = "ACKGAP_VALKEY_IMAGE";

/// The image to run, `(name, tag)`: `$ACKGAP_VALKEY_IMAGE` if set (a missing
/// tag means `latest`), else `ackgap/valkey:9.1.2`.
pub fn image_reference() -> (String, String) {
    match std::env::var(IMAGE_ENV) {
        Ok(value) if !value.trim().is_empty() => split_image(value.trim()),
        _ => (VALKEY_IMAGE_NAME.to_string(), VALKEY_IMAGE_TAG.to_string()),
    }
}

/// Splits `name:tag`; a colon before the last `/` belongs to a registry
/// host, not a tag.
fn split_image(reference: &str) -> (String, String) {
    match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_string(), tag.to_string()),
        _ => (reference.to_string(), "latest".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_image_reads_the_tag_after_the_last_colon_only() {
        assert_eq!(
            split_image("valkey/valkey:9.1"),
            ("valkey/valkey".to_string(), "9.1".to_string())
        );
        assert_eq!(
            split_image("localhost:5000/valkey"),
            ("localhost:5000/valkey".to_string(), "latest".to_string())
        );
        assert_eq!(
            split_image("localhost:5000/valkey:9"),
            ("localhost:5000/valkey".to_string(), "9".to_string())
        );
    }
}
