//! CSV from serde records, so a CSV's columns are the JSON schema's names with no second list
//! to keep in step: a record's leaves, in field order, named by their path (`owner.comm`,
//! `container.name`). The header comes from a template record with every optional part present,
//! so it is the same for every file; a row leaves out what it does not have.

use std::fmt;
use std::io::Write;

use anyhow::{Context, Result};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Serialize;

/// A JSON value that keeps its keys in the order they were written (serde_json's own map sorts
/// them unless a crate-wide feature says otherwise).
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(String),
    Object(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Number(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Number(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                // serde_json's shortest round-trip form, as in the JSON output.
                Ok(Node::Number(serde_json::Number::from_f64(v).map_or_else(String::new, |n| n.to_string())))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                // A list is one cell: its JSON.
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<serde_json::Value>()? {
                    items.push(v);
                }
                serde_json::to_string(&items).map(Node::Array).map_err(de::Error::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Node>()? {
                    fields.push((k, v));
                }
                Ok(Node::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// A record's leaves as (path, cell), in field order. A null object is one leaf, its own path.
fn leaves(record: &impl Serialize) -> Result<Vec<(String, String)>> {
    let json = serde_json::to_string(record).context("encoding a record")?;
    let node: Node = serde_json::from_str(&json).context("re-reading a record")?;
    let mut out = Vec::new();
    flatten(String::new(), node, &mut out);
    Ok(out)
}

fn flatten(path: String, node: Node, out: &mut Vec<(String, String)>) {
    let cell = match node {
        Node::Object(fields) => {
            for (k, v) in fields {
                let p = if path.is_empty() { k } else { format!("{path}.{k}") };
                flatten(p, v, out);
            }
            return;
        }
        Node::Null => String::new(),
        Node::Bool(b) => b.to_string(),
        Node::Number(n) | Node::Array(n) => n,
        Node::Str(s) => defuse(s),
    };
    out.push((path, cell));
}

/// Text from the host opened in a spreadsheet must not run as a formula: a cell that would
/// start with `=`, `+`, `-`, `@` or a control character gets a leading `'` (numbers are not
/// text and keep their sign).
fn defuse(s: String) -> String {
    match s.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r' | '\n') => format!("'{s}"),
        _ => s,
    }
}

/// CSV rows of one record type.
pub struct CsvTable<W: Write> {
    columns: Vec<String>,
    out: csv::Writer<W>,
}

impl<W: Write> CsvTable<W> {
    /// Writes the header: the leaves of `template`, a record with every optional part present.
    pub fn new(out: W, template: &impl Serialize) -> Result<Self> {
        let columns: Vec<String> = leaves(template)?.into_iter().map(|(k, _)| k).collect();
        let mut out = csv::Writer::from_writer(out);
        out.write_record(&columns).context("writing the CSV header")?;
        Ok(Self { columns, out })
    }

    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    pub fn row(&mut self, record: &impl Serialize) -> Result<()> {
        let mut cells = leaves(record)?;
        let row = self.columns.iter().map(|c| match cells.iter().position(|(k, _)| k == c) {
            Some(i) => std::mem::take(&mut cells[i].1),
            None => String::new(),
        });
        self.out.write_record(row).context("writing a CSV row")?;
        debug_assert!(
            cells.iter().all(|(k, _)| self.columns.iter().any(|c| c == k || c.starts_with(&format!("{k}.")))),
            "a leaf the template lacks: {cells:?}"
        );
        Ok(())
    }

    pub fn finish(mut self) -> Result<W> {
        self.out.flush().context("writing CSV")?;
        self.out.into_inner().map_err(|e| anyhow::anyhow!("writing CSV: {}", e.error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Inner {
        a: u32,
        b: Option<String>,
    }

    #[derive(Serialize)]
    struct Rec {
        z: f64,
        inner: Option<Inner>,
        #[serde(flatten)]
        flat: Inner,
        list: Vec<u8>,
        text: String,
    }

    #[test]
    fn columns_follow_field_order_and_paths_and_rows_leave_out_what_is_missing() {
        let full = Rec {
            z: 0.5,
            inner: Some(Inner { a: 1, b: Some("x".into()) }),
            flat: Inner { a: 2, b: None },
            list: vec![1, 2],
            text: "=cmd|' /C calc'!A0".into(),
        };
        let mut t = CsvTable::new(Vec::new(), &full).expect("table");
        assert_eq!(t.columns(), ["z", "inner.a", "inner.b", "a", "b", "list", "text"]);
        t.row(&full).expect("row");
        t.row(&Rec { inner: None, text: "a,\"b\"\nc".into(), ..full }).expect("row");
        let text = String::from_utf8(t.finish().expect("finish")).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "z,inner.a,inner.b,a,b,list,text");
        assert_eq!(lines[1], "0.5,1,x,2,,\"[1,2]\",'=cmd|' /C calc'!A0");
        assert_eq!(lines[2], "0.5,,,2,,\"[1,2]\",\"a,\"\"b\"\"");
        assert_eq!(lines[3], "c\"");
    }
}
