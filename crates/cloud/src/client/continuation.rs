//! How a request that continues an unfinished answer (its conversation
//! ends with an assistant turn: `ChatMessage::split_prefill`) is written
//! for the provider, as [`ContinueWith`] says: the turn as the last
//! message (llama-server), plus vLLM's two fields, or followed by an
//! instruction. Every other request is sent as it is. It must not send
//! anything itself.

use crate::config::ContinueWith;
use edgecloud_core::request::ChatMessage;
use edgecloud_wire::openai::ChatRequest;
use std::borrow::Cow;

/// What a provider that honours no prefill is asked after the
/// unfinished turn.
pub(super) const INSTRUCTION: &str = "Your answer above was cut off. Continue it from \
exactly where it stops: write only the rest, without repeating any of it and without \
any preface.";

/// The conversation to send.
pub(super) fn messages(messages: &[ChatMessage], with: ContinueWith) -> Cow<'_, [ChatMessage]> {
    match (with, ChatMessage::split_prefill(messages)) {
        (ContinueWith::Instruction, Some(_)) => {
            let mut v = messages.to_vec();
            v.push(ChatMessage::user(INSTRUCTION));
            Cow::Owned(v)
        }
        _ => Cow::Borrowed(messages),
    }
}

/// The request body: `request` as JSON, with vLLM's fields when it
/// continues an answer and the provider is vLLM.
pub(super) fn body(
    request: &ChatRequest<'_>,
    messages: &[ChatMessage],
    with: ContinueWith,
) -> Vec<u8> {
    let continues = ChatMessage::split_prefill(messages).is_some();
    if !(continues && with == ContinueWith::Vllm) {
        return serde_json::to_vec(request).expect("the request body is plain data");
    }
    let mut value = serde_json::to_value(request).expect("the request body is plain data");
    if let Some(obj) = value.as_object_mut() {
        obj.insert("continue_final_message".into(), true.into());
        obj.insert("add_generation_prompt".into(), false.into());
    }
    serde_json::to_vec(&value).expect("the request body is plain data")
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_core::request::Sampling;
    use serde_json::Value;

    fn sent(with: ContinueWith, msgs: &[ChatMessage]) -> Value {
        let sampling = Sampling::default();
        let m = messages(msgs, with);
        let req = ChatRequest::new("m", &m, &sampling, true, true, false);
        serde_json::from_slice(&body(&req, msgs, with)).unwrap()
    }

    #[test]
    fn each_provider_gets_the_unfinished_turn_in_the_shape_it_continues() {
        let msgs = [ChatMessage::user("q"), ChatMessage::assistant("The sky")];
        let last_two = |v: &Value| {
            let m = v["messages"].as_array().unwrap();
            (
                m.len(),
                m[m.len() - 1]["role"].clone(),
                m[m.len() - 1]["content"].clone(),
            )
        };
        let v = sent(ContinueWith::Prefill, &msgs);
        assert_eq!(last_two(&v), (2, "assistant".into(), "The sky".into()));
        assert!(v.get("continue_final_message").is_none());
        let v = sent(ContinueWith::Vllm, &msgs);
        assert_eq!(last_two(&v), (2, "assistant".into(), "The sky".into()));
        assert_eq!(v["continue_final_message"], true);
        assert_eq!(v["add_generation_prompt"], false);
        let v = sent(ContinueWith::Instruction, &msgs);
        assert_eq!(last_two(&v), (3, "user".into(), INSTRUCTION.into()));
        // A request that continues nothing is sent as it is.
        let plain = [ChatMessage::user("q")];
        for with in [ContinueWith::Vllm, ContinueWith::Instruction] {
            let v = sent(with, &plain);
            assert_eq!(v["messages"].as_array().unwrap().len(), 1);
            assert!(v.get("continue_final_message").is_none());
        }
    }
}
