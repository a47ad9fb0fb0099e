//! Which chat template turns a conversation into a prompt, and how that
//! choice is described in reports (`chat_template` in `LocalInfo` and in
//! `edgecloud local --json`). Rendering stays in `generate.rs`.
//!
//! The order, first match wins:
//! 1. `LocalConfig::chat_template` (`configured`);
//! 2. the model's own `tokenizer.chat_template` (`model`);
//! 3. for a model without one, its architecture's conventional template,
//!    where llama.cpp has it built in (`gemma (by architecture)`);
//! 4. for the `llama` architecture, which covers several chat formats,
//!    the one its vocabulary's control tokens announce (`llama3 (by
//!    vocabulary)` for `<|start_header_id|>`, `mistral-v7`/`mistral-v3` for
//!    `[INST]`);
//! 5. ChatML (`chatml (fallback)`), what llama.cpp's own server assumes.

/// The conventional template of a GGUF architecture
/// (`general.architecture`), as a name llama.cpp's built-in matcher knows.
/// `None` where the architecture does not settle it (`llama`) or llama.cpp
/// has no built-in for it.
pub(super) fn for_architecture(architecture: &str) -> Option<&'static str> {
    Some(match architecture {
        "gemma" | "gemma2" | "gemma3" | "gemma3n" => "gemma",
        "phi3" => "phi3",
        "qwen2" | "qwen2moe" | "qwen2vl" | "qwen3" | "qwen3moe" => "chatml",
        "command-r" | "cohere2" => "command-r",
        "chatglm" => "chatglm4",
        "exaone" => "exaone3",
        "exaone4" => "exaone4",
        "granite" | "granitemoe" => "granite",
        "minicpm" => "minicpm",
        "orion" => "orion",
        "llama4" => "llama4",
        "deepseek" => "deepseek",
        "deepseek2" => "deepseek3",
        "rwkv6" | "rwkv7" => "rwkv-world",
        "gpt-oss" => "gpt-oss",
        _ => return None,
    })
}

/// The template a `llama`-architecture vocabulary announces through its
/// control tokens; `is_control(text)` says whether `text` is one control
/// token of the model.
pub(super) fn for_llama_vocabulary(is_control: impl Fn(&str) -> bool) -> Option<&'static str> {
    if is_control("<|start_header_id|>") && is_control("<|eot_id|>") {
        Some("llama3")
    } else if is_control("[INST]") && is_control("[SYSTEM_PROMPT]") {
        Some("mistral-v7")
    } else if is_control("[INST]") {
        Some("mistral-v3")
    } else {
        None
    }
}

/// Where the template in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// `LocalConfig::chat_template`.
    Configured,
    /// The model's `tokenizer.chat_template`.
    Model,
    /// The architecture's convention (the template's name).
    Architecture(&'static str),
    /// The vocabulary's control tokens (the template's name).
    Vocabulary(&'static str),
    /// Nothing else applied: ChatML.
    Fallback,
}

impl Origin {
    /// As reported: `model`, `configured`, `gemma (by architecture)`,
    /// `llama3 (by vocabulary)`, `chatml (fallback)`.
    pub(super) fn describe(self) -> String {
        match self {
            Origin::Configured => "configured".into(),
            Origin::Model => "model".into(),
            Origin::Architecture(name) => format!("{name} (by architecture)"),
            Origin::Vocabulary(name) => format!("{name} (by vocabulary)"),
            Origin::Fallback => "chatml (fallback)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_map_to_names_llama_cpp_knows() {
        assert_eq!(for_architecture("gemma2"), Some("gemma"));
        assert_eq!(for_architecture("phi3"), Some("phi3"));
        assert_eq!(for_architecture("qwen2"), Some("chatml"));
        assert_eq!(for_architecture("llama"), None);
        assert_eq!(for_architecture("something-new"), None);
        for arch in [
            "gemma",
            "phi3",
            "qwen2",
            "command-r",
            "chatglm",
            "exaone",
            "granite",
            "minicpm",
            "orion",
            "llama4",
            "deepseek",
            "deepseek2",
            "rwkv6",
            "gpt-oss",
            "exaone4",
        ] {
            let name = for_architecture(arch).unwrap();
            assert!(
                super::super::ffi::llama_cpp_knows_template(name),
                "{arch} -> {name}"
            );
        }
    }

    #[test]
    fn llama_vocabularies_announce_their_format() {
        let vocab = |tokens: &'static [&'static str]| move |t: &str| tokens.contains(&t);
        assert_eq!(
            for_llama_vocabulary(vocab(&["<|start_header_id|>", "<|eot_id|>"])),
            Some("llama3")
        );
        assert_eq!(for_llama_vocabulary(vocab(&["[INST]"])), Some("mistral-v3"));
        assert_eq!(
            for_llama_vocabulary(vocab(&["[INST]", "[SYSTEM_PROMPT]"])),
            Some("mistral-v7")
        );
        assert_eq!(for_llama_vocabulary(vocab(&["<|im_start|>"])), None);
        for name in ["llama3", "mistral-v3", "mistral-v7"] {
            assert!(super::super::ffi::llama_cpp_knows_template(name), "{name}");
        }
    }

    #[test]
    fn descriptions() {
        assert_eq!(
            Origin::Architecture("gemma").describe(),
            "gemma (by architecture)"
        );
        assert_eq!(Origin::Fallback.describe(), "chatml (fallback)");
        assert_eq!(Origin::Model.describe(), "model");
    }
}
