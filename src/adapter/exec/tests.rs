//! The `exec:` adapter's own rules: answers, hellos, quotes.

use serde_json::json;

use super::super::protocol::ErrorKind;
use super::*;

#[test]
fn an_answer_needs_an_id_and_exactly_one_of_ok_and_error() {
    assert!(parse_answer(r#"{"in_reply_to":3,"ok":null}"#).is_ok());
    let (id, answer) =
        parse_answer(r#"{"in_reply_to":4,"error":{"kind":"unknown","message":"m"}}"#).unwrap();
    assert_eq!(id, 4);
    assert_eq!(answer.unwrap_err().kind, ErrorKind::Unknown);
    for bad in [
        "hello",
        "[1]",
        r#"{"ok":1}"#,
        r#"{"in_reply_to":1}"#,
        r#"{"in_reply_to":1,"ok":1,"error":{"kind":"x"}}"#,
        r#"{"in_reply_to":-1,"ok":1}"#,
        r#"{"in_reply_to":1,"error":"boom"}"#,
        r#"{"in_reply_to":1,"error":{"kind":"teapot","message":"m"}}"#,
    ] {
        assert!(parse_answer(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn error_kinds_map_to_their_history_class() {
    let r = Remote::new;
    assert!(remote_error("lease", r(ErrorKind::Unknown, "timeout")).is_unknown());
    assert!(matches!(
        remote_error("lease", r(ErrorKind::Unavailable, "")),
        QueueError::Unavailable { .. }
    ));
    assert!(matches!(
        remote_error("enqueue", r(ErrorKind::Refused, "EMQKIND id")),
        QueueError::Kind { .. }
    ));
    assert!(matches!(
        remote_error("enqueue", r(ErrorKind::Refused, "bad")),
        QueueError::BadArgument { .. }
    ));
    assert!(matches!(
        remote_error("fail", r(ErrorKind::Unsupported, "")),
        QueueError::Unsupported { .. }
    ));
    match remote_error(
        "read",
        r(ErrorKind::Server, "WRONGTYPE Operation against a key"),
    ) {
        QueueError::Server { code, .. } => assert_eq!(code, "WRONGTYPE"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_hello_without_a_required_operation_is_refused_by_name() {
    let ok = json!({"name": "q", "capabilities": {
        "operations": ["enqueue", "lease", "read", "clear"],
        "logical_time": false, "fences": false}});
    let e = read_hello(&ok).unwrap_err();
    assert!(e.contains("complete"), "{e}");
    let ok = json!({"name": "q", "protocol": 2, "capabilities": {}});
    assert!(read_hello(&ok).unwrap_err().contains("protocol 2"));
}

#[test]
fn a_hello_promises_dedup_unless_it_says_false() {
    let hello = |dedup: Option<Value>| {
        let mut caps = json!({"operations": ["enqueue", "lease", "complete", "read", "clear"],
            "logical_time": false, "fences": false});
        if let Some(d) = dedup {
            caps["dedup"] = d;
        }
        read_hello(&json!({"name": "q", "capabilities": caps}))
    };
    assert!(
        hello(None).unwrap().1.dedup,
        "absent: an old adapter, unchanged"
    );
    assert!(hello(Some(json!(true))).unwrap().1.dedup);
    assert!(!hello(Some(json!(false))).unwrap().1.dedup);
    let e = hello(Some(json!("no"))).unwrap_err();
    assert!(e.contains("capabilities.dedup"), "{e}");
}

#[test]
fn a_long_line_is_quoted_cut() {
    let q = quote(&"é".repeat(500));
    assert!(q.len() < 300 && q.ends_with("(1000 bytes)"), "{q}");
}
