//! The prompt-only signals of a workload's items, as recorded by
//! `edgecloud bench prompt-signals` (issue 33): per item, the local
//! model's mean log-probability of the prompt's own tokens and, when
//! asked, the prompt's embedding, each with what it cost. Owns the file
//! format (JSON Lines: a header naming the model by SHA-256 and the
//! workload, then one line per item), reading it back, and the checks
//! that a file belongs with the runs it is joined to. It must not run
//! lanes (the CLI does) nor compute neighbours (`neighbours` does).

use super::error::BenchError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `kind` of a prompt-signals file's header line.
pub const PROMPT_SIGNALS_KIND: &str = "edgecloud-prompt-signals";

/// What a prompt-signals file was made with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptSignalsHeader {
    /// Always [`PROMPT_SIGNALS_KIND`].
    pub kind: String,
    /// The model file, as given.
    pub model: String,
    /// The model file's SHA-256: a file from another model is refused.
    pub model_sha256: String,
    /// The workload, as given (`bench --workload`).
    pub workload: String,
    /// How the embeddings were made (e.g. `local model, mean pooling`),
    /// when the file has embeddings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<String>,
}

/// One item's prompt-only signals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptItem {
    /// The workload item's id.
    pub item: String,
    /// Tokens of the prompt (chat template applied).
    pub prompt_tokens: u32,
    /// Mean log-probability of the prompt's tokens (nats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprob: Option<f64>,
    /// What the prompt pass took, ms.
    pub prompt_ms: f64,
    /// The prompt's embedding, unit length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// What the embedding took, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed_ms: Option<f64>,
}

/// A whole prompt-signals file.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSignals {
    /// What it was made with.
    pub header: PromptSignalsHeader,
    /// Its items by id.
    pub items: BTreeMap<String, PromptItem>,
}

impl PromptSignals {
    /// Parses a file's text (`source` names it in errors). A later line
    /// for the same item replaces an earlier one (a resumed run).
    pub fn parse(source: &str, text: &str) -> Result<Self, BenchError> {
        let bad = |line: usize, reason: String| BenchError::WorkloadLine {
            source_name: source.to_string(),
            line,
            reason,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines
            .next()
            .ok_or_else(|| bad(1, "empty: no header line".into()))?;
        let header: PromptSignalsHeader = serde_json::from_str(first)
            .map_err(|e| bad(1, format!("not a prompt-signals header: {e}")))?;
        if header.kind != PROMPT_SIGNALS_KIND {
            return Err(bad(
                1,
                format!("kind `{}`, expected `{PROMPT_SIGNALS_KIND}`", header.kind),
            ));
        }
        let mut items = BTreeMap::new();
        let mut width = None;
        for (i, line) in lines {
            let item: PromptItem =
                serde_json::from_str(line).map_err(|e| bad(i + 1, e.to_string()))?;
            if let Some(e) = &item.embedding {
                match width {
                    None => width = Some(e.len()),
                    Some(w) if w != e.len() => {
                        return Err(bad(
                            i + 1,
                            format!(
                            "item `{}` has an embedding of {} dimensions, the file's others {w}",
                            item.item,
                            e.len()
                        ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            items.insert(item.item.clone(), item);
        }
        Ok(Self { header, items })
    }

    /// Reads a file.
    pub fn read(path: &std::path::Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("reading", path, e))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// The embeddings' width, when the file has embeddings.
    pub fn dimensions(&self) -> Option<usize> {
        self.items
            .values()
            .find_map(|i| i.embedding.as_ref().map(Vec::len))
    }

    /// Merges `other`'s signals into this file's (a prompt-log-probability
    /// pass and an embedding pass of the same model and workload); the
    /// two must match.
    pub fn merge(mut self, other: PromptSignals, source: &str) -> Result<Self, BenchError> {
        same_model(&self.header, &other.header, source)?;
        if file_name(&self.header.workload) != file_name(&other.header.workload) {
            return Err(BenchError::Mismatch {
                what: format!(
                    "{source} is of workload `{}`, the other prompt signals of `{}`",
                    other.header.workload, self.header.workload
                ),
            });
        }
        if self.header.embedding.is_none() {
            self.header.embedding = other.header.embedding.clone();
        }
        for (id, o) in other.items {
            let e = self.items.entry(id).or_insert_with(|| o.clone());
            e.prompt_logprob = e.prompt_logprob.or(o.prompt_logprob);
            if e.embedding.is_none() {
                e.embedding = o.embedding;
                e.embed_ms = o.embed_ms;
            }
        }
        Ok(self)
    }

    /// Checks that this file belongs with bench runs of `workload` (the
    /// runs' `--workload` as given) and covers every one of `items`.
    pub fn check_covers<'a>(
        &self,
        workload: &str,
        items: impl Iterator<Item = &'a str>,
        source: &str,
    ) -> Result<(), BenchError> {
        if file_name(&self.header.workload) != file_name(workload) {
            return Err(BenchError::Mismatch {
                what: format!(
                    "{source} was recorded on workload `{}`, the runs on `{workload}`",
                    self.header.workload
                ),
            });
        }
        let missing: Vec<&str> = items.filter(|i| !self.items.contains_key(*i)).collect();
        if let Some(first) = missing.first() {
            return Err(BenchError::Mismatch {
                what: format!(
                    "{source} has no signals for {} of the runs' items (the first: `{first}`)",
                    missing.len()
                ),
            });
        }
        Ok(())
    }
}

/// Checks that two files' signals come from the same model file and, when
/// both have embeddings, embeddings of the same width.
pub fn check_pair(
    cal: &PromptSignals,
    eval: &PromptSignals,
    eval_source: &str,
) -> Result<(), BenchError> {
    same_model(&cal.header, &eval.header, eval_source)?;
    if let (Some(a), Some(b)) = (cal.dimensions(), eval.dimensions()) {
        if a != b {
            return Err(BenchError::Mismatch {
                what: format!(
                    "{eval_source} has embeddings of {b} dimensions, the calibration's {a}"
                ),
            });
        }
    }
    Ok(())
}

fn same_model(
    a: &PromptSignalsHeader,
    b: &PromptSignalsHeader,
    source: &str,
) -> Result<(), BenchError> {
    if a.model_sha256 != b.model_sha256 {
        return Err(BenchError::Mismatch {
            what: format!(
                "{source} was recorded with model {} (SHA-256 {}), the calibration with {} ({})",
                b.model,
                short(&b.model_sha256),
                a.model,
                short(&a.model_sha256)
            ),
        });
    }
    Ok(())
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// The last component of a workload spec (`builtin:` specs as they are):
/// the same workload given by another relative path still matches.
fn file_name(spec: &str) -> &str {
    if spec.starts_with("builtin:") {
        return spec;
    }
    spec.rsplit('/').next().unwrap_or(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(sha: &str, workload: &str) -> String {
        serde_json::to_string(&PromptSignalsHeader {
            kind: PROMPT_SIGNALS_KIND.into(),
            model: "m.gguf".into(),
            model_sha256: sha.into(),
            workload: workload.into(),
            embedding: None,
        })
        .unwrap()
    }

    fn line(item: &str, lp: f64, emb: Option<Vec<f32>>) -> String {
        serde_json::to_string(&PromptItem {
            item: item.into(),
            prompt_tokens: 10,
            prompt_logprob: Some(lp),
            prompt_ms: 5.0,
            embedding: emb,
            embed_ms: None,
        })
        .unwrap()
    }

    #[test]
    fn a_file_reads_back_and_a_later_line_replaces_an_earlier_one() {
        let text = [
            header("aa", "dir/w.jsonl"),
            line("a", -1.0, None),
            line("a", -2.0, None),
        ]
        .join("\n");
        let f = PromptSignals::parse("f", &text).unwrap();
        assert_eq!(f.items["a"].prompt_logprob, Some(-2.0));
        f.check_covers("other/w.jsonl", ["a"].into_iter(), "f")
            .unwrap();
    }

    #[test]
    fn another_model_workload_width_or_missing_items_are_named() {
        let a = PromptSignals::parse(
            "a",
            &[
                header("aa", "w.jsonl"),
                line("x", -1.0, Some(vec![1.0, 0.0])),
            ]
            .join("\n"),
        )
        .unwrap();
        let other_model = PromptSignals::parse(
            "b",
            &[header("bb", "w.jsonl"), line("x", -1.0, None)].join("\n"),
        )
        .unwrap();
        let e = check_pair(&a, &other_model, "b").unwrap_err().to_string();
        assert!(e.contains("SHA-256 bb") && e.contains("aa"), "{e}");
        let wider = PromptSignals::parse(
            "c",
            &[
                header("aa", "v.jsonl"),
                line("y", -1.0, Some(vec![1.0, 0.0, 0.0])),
            ]
            .join("\n"),
        )
        .unwrap();
        let e = check_pair(&a, &wider, "c").unwrap_err().to_string();
        assert!(e.contains("3 dimensions") && e.contains("'s 2"), "{e}");
        let e = a
            .check_covers("v.jsonl", ["x"].into_iter(), "a")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("workload `w.jsonl`") && e.contains("`v.jsonl`"),
            "{e}"
        );
        let e = a
            .check_covers("w.jsonl", ["x", "z", "q"].into_iter(), "a")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 of the runs' items") && e.contains("`z`"),
            "{e}"
        );
        let mixed = [
            header("aa", "w.jsonl"),
            line("x", -1.0, Some(vec![1.0])),
            line("y", -1.0, Some(vec![1.0, 0.0])),
        ]
        .join("\n");
        let e = PromptSignals::parse("m", &mixed).unwrap_err().to_string();
        assert!(e.contains("2 dimensions") && e.contains("others 1"), "{e}");
        assert!(PromptSignals::parse("e", "").is_err());
    }
}
