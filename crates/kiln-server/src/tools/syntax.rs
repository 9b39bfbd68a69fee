//! How a model writes a tool call, read from its chat template, and the marker tokens that
//! syntax uses (control tokens, which plain detokenised text leaves out).

use kiln_tokenizer::Tokenizer;

use super::gemma;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call
    /// (Qwen 2.5 / 3, Hermes; kiln's fallback for templates that know no tools).
    Hermes,
    /// The whole reply a JSON object `{"name": ..., "parameters": {...}}` (Llama 3.1 - 3.3).
    LlamaJson,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Mistral Nemo and v3 templates).
    MistralList,
    /// `[TOOL_CALLS]name[ARGS]{...}` per call (Mistral Small 3.2, Devstral, Ministral 3).
    MistralArgs,
    /// `<|tool_call>call:name{key:value,...}<tool_call|>` per call, strings between `<|"|>`
    /// (Gemma 4; see [`super::gemma`]).
    Gemma4,
}

/// What the template offers: the syntax, and whether the template itself renders `tools`
/// (else kiln describes them in a system block and asks for the Hermes form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateTools {
    pub syntax: ToolSyntax,
    pub native: bool,
}

impl TemplateTools {
    pub fn of(template_source: Option<&str>) -> TemplateTools {
        let src = template_source.unwrap_or("");
        let native = |syntax| TemplateTools {
            syntax,
            native: true,
        };
        if src.contains("<|tool_call>call:") {
            native(ToolSyntax::Gemma4)
        } else if src.contains("[TOOL_CALLS]") && src.contains("[ARGS]") {
            native(ToolSyntax::MistralArgs)
        } else if src.contains("[TOOL_CALLS]") {
            native(ToolSyntax::MistralList)
        } else if src.contains("<tool_call>") && src.contains("tools") {
            native(ToolSyntax::Hermes)
        } else if src.contains("\"parameters\": dictionary") {
            native(ToolSyntax::LlamaJson)
        } else {
            TemplateTools {
                syntax: ToolSyntax::Hermes,
                native: false,
            }
        }
    }
}

impl ToolSyntax {
    /// The marker pieces of this syntax that may be control tokens.
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            ToolSyntax::Hermes => &["<tool_call>", "</tool_call>"],
            ToolSyntax::LlamaJson => &["<|python_tag|>"],
            ToolSyntax::MistralList => &["[TOOL_CALLS]"],
            ToolSyntax::MistralArgs => &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"],
            ToolSyntax::Gemma4 => &[
                gemma::CALL_OPEN,
                gemma::CALL_CLOSE,
                gemma::QUOTE,
                gemma::RESPONSE_OPEN,
            ],
        }
    }

    /// Where a reply's calls begin.
    pub fn opener(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => "<tool_call>",
            ToolSyntax::LlamaJson => "{",
            ToolSyntax::MistralList | ToolSyntax::MistralArgs => "[TOOL_CALLS]",
            ToolSyntax::Gemma4 => gemma::CALL_OPEN,
        }
    }

    /// The control token at which the model hands over to the tool, where the reply must end
    /// (Gemma 4 opens the tool's response itself).
    pub fn handover(self) -> Option<&'static str> {
        match self {
            ToolSyntax::Gemma4 => Some(gemma::RESPONSE_OPEN),
            _ => None,
        }
    }
}

/// The control-token ids among a syntax's markers, with their text: put back into the reply's
/// text so that the call parser sees them.
#[derive(Debug, Clone, Default)]
pub struct MarkerTokens {
    pub ids: Vec<(u32, String)>,
}

impl MarkerTokens {
    pub fn new(tok: &Tokenizer, syntax: ToolSyntax) -> MarkerTokens {
        let ids = syntax
            .markers()
            .iter()
            .filter_map(|m| tok.token_id(m).map(|id| (id, m.to_string())))
            .filter(|(id, _)| tok.is_special(*id))
            .collect();
        MarkerTokens { ids }
    }

    /// The text of a token as the call parser reads it: a marker's text, else what was output.
    pub fn text<'a>(&'a self, id: u32, text: &'a str) -> &'a str {
        self.ids
            .iter()
            .find(|m| m.0 == id)
            .map_or(text, |m| m.1.as_str())
    }

    /// A marker's id when it is a control token (grammars must name it by id).
    pub fn id(&self, marker: &str) -> Option<u32> {
        self.ids.iter().find(|m| m.1 == marker).map(|m| m.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str) -> String {
        let path = crate::test_data::templates_dir().join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn real_templates_name_their_syntax() {
        for (file, syntax) in [
            ("Qwen-Qwen2.5-7B-Instruct.jinja", ToolSyntax::Hermes),
            ("Qwen-Qwen3-0.6B.jinja", ToolSyntax::Hermes),
            (
                "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                ToolSyntax::Hermes,
            ),
            (
                "meta-llama-Llama-3.1-8B-Instruct.jinja",
                ToolSyntax::LlamaJson,
            ),
            (
                "meta-llama-Llama-3.3-70B-Instruct.jinja",
                ToolSyntax::LlamaJson,
            ),
            (
                "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                ToolSyntax::MistralList,
            ),
            (
                "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                ToolSyntax::MistralArgs,
            ),
            ("google-gemma-4-31B-it.jinja", ToolSyntax::Gemma4),
            (
                "google-gemma-4-31B-it-interleaved.jinja",
                ToolSyntax::Gemma4,
            ),
        ] {
            let src = template(file);
            assert_eq!(
                TemplateTools::of(Some(&src)),
                TemplateTools {
                    syntax,
                    native: true
                },
                "{file}"
            );
        }
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
        assert_eq!(
            TemplateTools::of(Some(chatml)),
            TemplateTools {
                syntax: ToolSyntax::Hermes,
                native: false
            }
        );
    }
}
