//! Request fields kiln does not honour are refused by name, never skipped: a client that asks
//! for a function call, audio or a tool choice and silently gets plain text has been misled.
//!
//! Fields no request struct declares reach [`unread_field`] from the strict parser; one that
//! needs a look at its value (`modalities`) is checked in [`check_modalities`]. Supporting one
//! of them later means declaring and honouring it and taking it out of here.

use crate::error::ApiError;

/// Top-level fields accepted and ignored because they change nothing in the answer.
pub const INERT_CHAT_FIELDS: &[&str] = &["user", "metadata", "store", "service_tier"];
pub const INERT_COMPLETION_FIELDS: &[&str] = &["user"];

/// Why a field is refused, for the ones clients send most.
fn reason(field: &str) -> Option<&'static str> {
    Some(match field {
        "functions" | "function_call" => {
            "The legacy `functions` / `function_call` API is not supported by this server."
        }
        "audio" => "`audio` output is not supported by this server.",
        "tool_choice" => "`tool_choice` is only allowed together with `tools`.",
        _ => return None,
    })
}

/// The 400 for a field that no part of the server reads (`path` as `messages[0].audio`).
pub fn unread_field(path: &str) -> ApiError {
    let top = path.split(['.', '[']).next().unwrap_or(path);
    let message = match reason(top) {
        Some(r) => r.to_string(),
        None => format!(
            "Unrecognized request argument supplied: `{path}`. This server does not support it."
        ),
    };
    ApiError::invalid_param(path, message).with_code("unsupported_parameter")
}

/// `modalities` is honoured only as `["text"]`.
pub fn check_modalities(modalities: Option<&[String]>) -> Result<(), ApiError> {
    if modalities.is_some_and(|m| m.iter().any(|x| x != "text")) {
        return Err(ApiError::invalid_param(
            "modalities",
            "`modalities` other than `text` are not supported by this server.",
        )
        .with_code("unsupported_parameter"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named_with_a_reason() {
        let e = unread_field("function_call");
        assert_eq!(e.param.as_deref(), Some("function_call"));
        assert!(e.message.contains("functions"), "{}", e.message);
        let e = unread_field("messages[2].audio");
        assert_eq!(e.param.as_deref(), Some("messages[2].audio"));
        let e = unread_field("prompt_adapter");
        assert!(e.message.contains("`prompt_adapter`"), "{}", e.message);
    }

    #[test]
    fn only_text_is_a_modality() {
        let text = vec!["text".to_string()];
        assert!(check_modalities(Some(&text)).is_ok());
        assert!(check_modalities(None).is_ok());
        let audio = vec!["text".to_string(), "audio".to_string()];
        let e = check_modalities(Some(&audio)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("modalities"));
    }
}
