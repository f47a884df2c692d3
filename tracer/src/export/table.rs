//! CSV from serde records, so a CSV's columns are the JSON schema's names with no second list
//! to keep in step: a record's leaves, in field order, named by their path (`owner.comm`,
//! `container.name`), serialized straight into cells by a serde serializer (the cells read as the
//! JSON output writes the same values). The header comes from the schema's shape of the record
//! (`with_every_part`: every optional part present), so it is the same for every file; a row
//! leaves out what it does not have.

use std::fmt;
use std::io::Write;

use anyhow::{Context, Result};
use serde::ser::{
    self, Serialize, SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant, Serializer,
};

/// A record's leaves as (path, cell), in field order, serialized straight into cells (no JSON
/// text in between). A null object is one leaf, its own path; a list is one cell, its JSON.
fn leaves(record: &impl Serialize) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    record.serialize(Leaf { path: String::new(), out: &mut out }).context("encoding a record")?;
    Ok(out)
}

/// Why a record could not be made cells: a shape JSON has no cell for.
#[derive(Debug)]
struct Unsupported(String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// The serializer of one value at `path`: a scalar is a cell, a struct or map goes one level
/// down (`path.key`), a list is one cell holding its JSON.
struct Leaf<'a> {
    path: String,
    out: &'a mut Vec<(String, String)>,
}

impl<'a> Leaf<'a> {
    fn cell(self, cell: String) -> Result<(), Unsupported> {
        self.out.push((self.path, cell));
        Ok(())
    }

    fn below(&mut self, key: &str) -> Leaf<'_> {
        Leaf { path: join(&self.path, key), out: self.out }
    }

    /// A number as the JSON output writes it (serde_json's shortest round-trip form; a
    /// non-finite float is null there, an empty cell here).
    fn number(self, v: &impl Serialize) -> Result<(), Unsupported> {
        let text = serde_json::to_string(v).map_err(ser::Error::custom)?;
        self.cell(if text == "null" { String::new() } else { text })
    }
}

/// The path of `key` below `path` (a top-level field is its own name).
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A list: its items gathered as JSON values, written as one cell.
struct ListCell<'a> {
    leaf: Leaf<'a>,
    items: Vec<serde_json::Value>,
}

impl ListCell<'_> {
    fn push(&mut self, v: &(impl Serialize + ?Sized)) -> Result<(), Unsupported> {
        self.items.push(serde_json::to_value(v).map_err(ser::Error::custom)?);
        Ok(())
    }

    fn write(self) -> Result<(), Unsupported> {
        let text = serde_json::to_string(&self.items).map_err(ser::Error::custom)?;
        self.leaf.cell(text)
    }
}

/// Lists, tuples and tuple variants alike: JSON arrays, so one cell each.
macro_rules! list_cell {
    ($($tr:ident :: $method:ident),*) => {$(
        impl $tr for ListCell<'_> {
            type Ok = ();
            type Error = Unsupported;

            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unsupported> {
                self.push(v)
            }

            fn end(self) -> Result<(), Unsupported> {
                self.write()
            }
        }
    )*};
}

list_cell!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// A struct's or map's fields, each one level below.
struct Fields<'a> {
    leaf: Leaf<'a>,
    key: Option<String>,
}

/// Structs and struct variants alike: each field one level below.
macro_rules! struct_fields {
    ($($tr:ident),*) => {$(
        impl $tr for Fields<'_> {
            type Ok = ();
            type Error = Unsupported;

            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> Result<(), Unsupported> {
                v.serialize(self.leaf.below(key))
            }

            fn end(self) -> Result<(), Unsupported> {
                Ok(())
            }
        }
    )*};
}

struct_fields!(SerializeStruct, SerializeStructVariant);

impl SerializeMap for Fields<'_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        // A JSON object's key is text: a string as it is, a number as serde_json writes it.
        self.key = Some(match serde_json::to_value(key).map_err(ser::Error::custom)? {
            serde_json::Value::String(text) => text,
            serde_json::Value::Number(n) => n.to_string(),
            other => return Err(Unsupported(format!("a map key that is not text: {other}"))),
        });
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unsupported> {
        let key = self.key.take().ok_or_else(|| Unsupported("a map value without its key".into()))?;
        v.serialize(self.leaf.below(&key))
    }

    fn end(self) -> Result<(), Unsupported> {
        Ok(())
    }
}

/// `fn serialize_X(self, v: T)` writing `v`'s text as the cell, for each `serialize_X: T`.
macro_rules! scalar_cells {
    ($($method:ident: $t:ty),*) => {$(
        fn $method(self, v: $t) -> Result<(), Unsupported> {
            self.cell(v.to_string())
        }
    )*};
}

impl<'a> Serializer for Leaf<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = ListCell<'a>;
    type SerializeTuple = ListCell<'a>;
    type SerializeTupleStruct = ListCell<'a>;
    type SerializeTupleVariant = ListCell<'a>;
    type SerializeMap = Fields<'a>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Fields<'a>;

    // Booleans and integers as JSON writes them.
    scalar_cells!(
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64
    );
    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        self.number(&v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        self.number(&v)
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        self.cell(defuse(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        self.cell(defuse(v.to_string()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unsupported> {
        let text = serde_json::to_string(v).map_err(ser::Error::custom)?;
        self.cell(text)
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.cell(String::new())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Unsupported> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.cell(String::new())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        self.cell(String::new())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unsupported> {
        self.cell(defuse(variant.to_string()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<(), Unsupported> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Unsupported> {
        // JSON's `{"Variant": value}`.
        v.serialize(self.below(variant))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<ListCell<'a>, Unsupported> {
        Ok(ListCell { leaf: self, items: Vec::with_capacity(len.unwrap_or(0)) })
    }
    fn serialize_tuple(self, len: usize) -> Result<ListCell<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<ListCell<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<ListCell<'a>, Unsupported> {
        // JSON's `{"Variant": [...]}`.
        let leaf = Leaf { path: join(&self.path, variant), out: self.out };
        Ok(ListCell { leaf, items: Vec::with_capacity(len) })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Fields<'a>, Unsupported> {
        Ok(Fields { leaf: self, key: None })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, Unsupported> {
        Ok(Fields { leaf: self, key: None })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Fields<'a>, Unsupported> {
        // JSON's `{"Variant": {...}}`.
        Ok(Fields { leaf: Leaf { path: join(&self.path, variant), out: self.out }, key: None })
    }
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
    use serde::Serialize;

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

    #[test]
    fn cells_carry_the_json_outputs_numbers_exactly() {
        // Read back from JSON text (serde_json without float_roundtrip) this one came out a unit
        // in the last place off; the cell is what `--json` writes.
        #[derive(Serialize)]
        struct Ratio {
            r: f64,
            nan: f64,
            small: f32,
        }
        let rec = Ratio { r: 0.0017473225687250713, nan: f64::NAN, small: 0.1 };
        let json = serde_json::to_string(&rec).expect("json");
        assert_eq!(json, r#"{"r":0.0017473225687250713,"nan":null,"small":0.1}"#);
        let cells: Vec<String> = leaves(&rec).expect("leaves").into_iter().map(|(_, c)| c).collect();
        assert_eq!(cells, ["0.0017473225687250713", "", "0.1"]);
    }
}
