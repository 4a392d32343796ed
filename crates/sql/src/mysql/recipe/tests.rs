//! How values are written into a statement.

use super::*;

#[test]
fn values_are_written_in_as_literals_that_no_text_can_break_out_of() {
    let sql = "-- Waits up to ? seconds\nCALL p(?, ?,\n  ?, ?, ?)";
    let values: Vec<Value> = vec![
        "a'); DROP TABLE t; --".into(),
        (-7i64).into(),
        Value::Bytes(vec![0xff, 0x00, b'\\']),
        0.25f64.into(),
        Option::<&str>::None.into(),
    ];
    assert_eq!(
        with_values(sql, &values),
        "CALL p(X'6127293b2044524f50205441424c4520743b202d2d', -7,\n  X'ff005c', 0.250000, NULL)\n"
    );
}
