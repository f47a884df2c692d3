//! The decision record's two sides agree: `struct cct_decision` in decision.h, which the C
//! compiler holds to the offsets the header asserts, and [`DecisionRecord`] in tracer-common,
//! which the reader casts the ring's bytes to. This test reads the header's assertions, defines
//! and enums and compares them with the Rust type's layout and constants.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of_val};

use tracer_common::deep::{decision_kind, twin_algo, DecisionRecord, DECISION_SIZE, DECISION_VERSION};

const HEADER: &str = include_str!("decision.h");

/// `(name, offset, size)` of each field of the Rust type, in declaration order.
macro_rules! rust_fields {
    ($($field:ident),* $(,)?) => {{
        let r = DecisionRecord::default();
        vec![$((stringify!($field), offset_of!(DecisionRecord, $field), size_of_val(&r.$field))),*]
    }};
}

fn rust_layout() -> Vec<(&'static str, usize, usize)> {
    rust_fields!(
        ts_ns,
        cookie,
        pacing_rate,
        bw,
        cwnd_before,
        cwnd_after,
        ssthresh,
        min_rtt_us,
        srtt_us,
        mss,
        value,
        version,
        kind,
        algo,
        ca_state,
        arg,
        bbr_cycle,
        bbr_pacing_gain,
        bbr_cwnd_gain,
        _pad,
    )
}

/// The body of `struct cct_decision`'s declaration: `(name, size)` of each member, in order.
fn c_members() -> Vec<(String, usize)> {
    let body = HEADER.split("struct cct_decision {").nth(1).and_then(|rest| rest.split("};").next());
    let body = body.expect("decision.h declares struct cct_decision");
    body.lines()
        .filter_map(|line| line.split(';').next())
        .filter_map(|decl| {
            let mut words = decl.split_whitespace();
            let ty = words.next()?;
            let name = words.next()?;
            let size = match ty {
                "__u64" => 8,
                "__u32" => 4,
                "__u16" => 2,
                "__u8" => 1,
                other => panic!("decision.h: member {name} of type {other}: only __u8 to __u64 cross the ring"),
            };
            Some((name.to_string(), size))
        })
        .collect()
}

/// The header's `CCT_AT(field, offset);` assertions.
fn c_offsets() -> BTreeMap<String, usize> {
    HEADER
        .lines()
        .filter_map(|l| l.strip_prefix("CCT_AT(")?.strip_suffix(");"))
        .map(|args| {
            let (name, offset) = args.split_once(',').expect("CCT_AT(field, offset)");
            (name.trim().to_string(), offset.trim().parse().expect("a number"))
        })
        .collect()
}

/// `#define NAME value` in the header.
fn c_define(name: &str) -> usize {
    HEADER
        .lines()
        .find_map(|l| l.strip_prefix("#define ")?.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("decision.h defines {name}"))
}

/// The members of `enum NAME { ... }` whose names start with `prefix`, without it.
fn c_enum(name: &str, prefix: &str) -> BTreeMap<String, u8> {
    let body = HEADER.split(&format!("enum {name} {{")).nth(1).and_then(|rest| rest.split("};").next());
    body.unwrap_or_else(|| panic!("decision.h declares enum {name}"))
        .lines()
        .filter_map(|l| {
            let (member, value) = l.split_once('=')?;
            let value = value.split(',').next()?.trim().parse().ok()?;
            Some((member.trim().strip_prefix(prefix)?.to_string(), value))
        })
        .collect()
}

#[test]
fn every_member_sits_where_the_rust_type_has_it() {
    let rust = rust_layout();
    let c = c_members();
    let offsets = c_offsets();
    let c_names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
    let rust_names: Vec<&str> = rust.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(c_names, rust_names, "the same members in the same order");
    for ((name, offset, size), (_, c_size)) in rust.iter().zip(&c) {
        assert_eq!(offsets.get(*name), Some(offset), "decision.h asserts {name}'s offset as the Rust type has it");
        assert_eq!(size, c_size, "{name}: the same width on both sides");
    }
    assert_eq!(offsets.len(), rust.len(), "one assertion a member, no more");
    assert_eq!(c_define("CCT_DECISION_SIZE"), DECISION_SIZE);
    assert_eq!(c_define("CCT_DECISION_VERSION"), usize::from(DECISION_VERSION));
}

#[test]
fn kinds_and_algorithms_have_the_same_numbers() {
    let kinds = BTreeMap::from(
        [
            ("INIT", decision_kind::INIT),
            ("SSTHRESH", decision_kind::SSTHRESH),
            ("GROWTH", decision_kind::GROWTH),
            ("CWND_EVENT", decision_kind::CWND_EVENT),
            ("STATE", decision_kind::STATE),
            ("UNDO", decision_kind::UNDO),
            ("BBR", decision_kind::BBR),
        ]
        .map(|(n, v)| (n.to_string(), v)),
    );
    assert_eq!(c_enum("cct_decision_kind", "CCT_D_"), kinds);
    let algos = BTreeMap::from(
        [("CUBIC", twin_algo::CUBIC), ("RENO", twin_algo::RENO), ("BBR", twin_algo::BBR)]
            .map(|(n, v)| (n.to_string(), v)),
    );
    assert_eq!(c_enum("cct_algo", "CCT_ALGO_"), algos);
}
