//! A model's own Jinja chat template, rendered as Hugging Face renders it
//! (issue 24): `minijinja` with the settings and helpers chat templates
//! are written against: `trim_blocks` and `lstrip_blocks`, Python's
//! string and dict methods (`minijinja-contrib`'s `pycompat`), `tojson`
//! writing JSON as Python's `json.dumps` does (`", "` and `": "`
//! separators, non-ASCII kept), `raise_exception(message)` and
//! `strftime_now(format)`. llama.cpp's own `apply_chat_template` is not a
//! Jinja engine (it matches known templates by their text), so a template
//! that renders tools (`tools`, `message.tool_calls`, `role: "tool"`) needs
//! this.
//!
//! It renders text; what goes into the context (messages, tools) and what
//! a template means for tool calls is `toolcall`'s business.

use edgecloud_core::harness::ledger::calendar::civil_from_days;
use minijinja::value::{Kwargs, Serde};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde::Serialize;

/// Renders `template` with `context` (a serializable map: `messages`,
/// `tools`, `add_generation_prompt`, `bos_token`, `eos_token`...).
pub(super) fn render(template: &str, context: &impl Serialize) -> Result<String, String> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| e.to_string())?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", |format: String| strftime_now(&format));
    // A runaway template (a loop it never leaves) must not hang the lane.
    env.set_fuel(Some(5_000_000));
    let tmpl = env.template_from_str(template).map_err(|e| describe(&e))?;
    tmpl.render(Value::from(Serde(context)))
        .map_err(|e| describe(&e))
}

/// The error and its causes, on one line.
fn describe(e: &Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `tojson` as Hugging Face defines it for chat templates:
/// `json.dumps(value, ensure_ascii=False, indent=indent)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json: serde_json::Value = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    Ok(Value::from_safe_string(python_json(&json, indent)))
}

/// JSON text as Python's `json.dumps` writes it (`ensure_ascii=False`).
pub(super) fn python_json(value: &serde_json::Value, indent: Option<usize>) -> String {
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            value.serialize(&mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
            value.serialize(&mut ser)
        }
    };
    written.expect("a JSON value always serializes into memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// `", "` between items and `": "` after keys.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// `", "` before every item but the first, in arrays and objects alike.
fn item_separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

/// The current UTC time under a `strftime` format (the specifiers chat
/// templates use: `%Y %m %d %e %b %B %H %M %S %y %%`; others are kept).
fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(format, secs)
}

fn strftime(format: &str, unix_secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = unix_secs.div_euclid(86_400);
    let rest = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('H') => out.push_str(&format!("{:02}", rest / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rest / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rest % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_render_with_hugging_face_settings_and_helpers() {
        // lstrip/trim blocks, pycompat methods, tojson Python-style.
        let t = "{% for m in messages %}\n  {{ m.role.upper() }}: {{ m.content.strip() }}\n{% endfor %}\
                 {{ tools | tojson }}|{{ {'a': [1, 'é']} | tojson(indent=2) }}";
        let out = render(
            t,
            &json!({"messages": [{"role": "user", "content": " hi "}],
                "tools": [{"name": "f", "n": 1}]}),
        )
        .unwrap();
        assert_eq!(
            out,
            "  USER: hi\n[{\"n\": 1, \"name\": \"f\"}]|{\n  \"a\": [\n    1,\n    \"é\"\n  ]\n}"
        );
        let e = render("{{ raise_exception('no tools here') }}", &json!({})).unwrap_err();
        assert!(e.contains("no tools here"), "{e}");
        assert!(render("{% for %}", &json!({})).is_err());
    }

    #[test]
    fn strftime_covers_what_templates_use() {
        // 2024-07-26 13:25:09 UTC.
        let t = 1_722_000_309;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%B %e, %y %H:%M:%S %% %Z", t),
            "July 26, 24 13:25:09 % %Z"
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
