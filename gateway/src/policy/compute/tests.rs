//! The expression language's table and property tests.

use super::*;
use crate::testkit::terms;
use serde_json::json;

fn eval(text: &str, pairs: &[(&str, Value)]) -> Result<Value, EvalError> {
    Expression::parse(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .evaluate(&terms(pairs))
}

fn value(text: &str) -> String {
    match eval(text, &[]) {
        Ok(Value::String(s)) => s,
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn the_demo_difference_keeps_the_scale() {
    let got = eval(
        "replacement_price - item_price",
        &[
            ("replacement_price", json!("190.00")),
            ("item_price", json!("120.00")),
        ],
    );
    assert_eq!(got, Ok(json!("70.00")));
    assert_eq!(
        eval("a - b", &[("a", json!("120.00")), ("b", json!(190))]),
        Ok(json!("-70.00"))
    );
    // JSON numbers as serde_json prints them.
    assert_eq!(eval("a + 0", &[("a", json!(2.5))]), Ok(json!("2.5")));
    assert_eq!(eval("a * 2", &[("a", json!(7))]), Ok(json!("14")));
}

#[test]
fn precedence_and_associativity() {
    assert_eq!(value("1 + 2 * 3"), "7");
    assert_eq!(value("(1 + 2) * 3"), "9");
    assert_eq!(value("10 - 4 - 3"), "3");
    assert_eq!(value("-2 * -3"), "6");
    assert_eq!(value("- (1 - 3)"), "2");
    assert_eq!(value("2 - -2"), "4");
    assert_eq!(value("8 / 2 / 2"), "2.00");
}

#[test]
fn scales() {
    assert_eq!(value("190.00 - 120"), "70.00");
    assert_eq!(value("1.5 * 2.00"), "3.000");
    assert_eq!(value("0.1 + 0.2"), "0.3");
    assert_eq!(value("abs(-3.50)"), "3.50");
    assert_eq!(value("max(0, -5.00)"), "0.00");
    assert_eq!(value("min(0, -5.00)"), "-5.00");
    assert_eq!(value("max(1.5, 1.50)"), "1.50");
    assert_eq!(value("-0.00"), "0.00");
    assert_eq!(value("0.00 - 0"), "0.00");
}

#[test]
fn division_rounds_half_to_even_to_at_least_two_places() {
    assert_eq!(value("100.00 / 3"), "33.33");
    assert_eq!(value("200.00 / 3"), "66.67");
    assert_eq!(value("10 / 4"), "2.50");
    assert_eq!(value("1 / 8"), "0.12"); // 0.125: half to even
    assert_eq!(value("3 / 8"), "0.38"); // 0.375
    assert_eq!(value("-1 / 8"), "-0.12");
    assert_eq!(value("0.125 / 1"), "0.125");
    assert_eq!(value("10 / 2"), "5.00");
    assert_eq!(eval("1 / (2 - 2)", &[]), Err(EvalError::DivisionByZero));
    assert_eq!(
        eval("a / b", &[("a", json!("1")), ("b", json!("0.00"))]),
        Err(EvalError::DivisionByZero)
    );
}

#[test]
fn results_that_do_not_fit_are_errors() {
    let big = "79228162514264337593543950335";
    assert_eq!(eval(&format!("{big} + 1"), &[]), Err(EvalError::Overflow));
    assert_eq!(eval(&format!("{big} * 2"), &[]), Err(EvalError::Overflow));
    let tiny = "0.00000000000001"; // 14 places: the product would have 28
    assert_eq!(
        value(&format!("{tiny} * {tiny}")),
        format!("0.{}1", "0".repeat(27))
    );
    let tinier = "0.000000000000001"; // 15: 30 places
    assert_eq!(
        eval(&format!("{tinier} * {tinier}"), &[]),
        Err(EvalError::Overflow)
    );
}

#[test]
fn operands_are_plain_decimals() {
    for bad in [
        json!("1e3"),
        json!("+1"),
        json!("1_000"),
        json!("1,000.00"),
        json!(" 1"),
        json!("1."),
        json!(".5"),
        json!(""),
        json!("NaN"),
        json!("USD 5"),
        json!(true),
        json!(["1"]),
        json!({"amount": "1"}),
        json!(1e300),
    ] {
        assert_eq!(
            eval("a + 1", &[("a", bad.clone())]),
            Err(EvalError::NotANumber { term: "a".into() }),
            "{bad}"
        );
    }
    assert_eq!(
        eval("a + 1", &[]),
        Err(EvalError::Missing { term: "a".into() })
    );
    assert_eq!(
        eval("a + 1", &[("a", Value::Null)]),
        Err(EvalError::Missing { term: "a".into() })
    );
}

#[test]
fn syntax_errors() {
    let err = |text: &str| Expression::parse(text).unwrap_err();
    assert_eq!(err(""), SyntaxError::Empty);
    assert_eq!(err("   "), SyntaxError::Empty);
    assert!(matches!(err("a +"), SyntaxError::UnexpectedEnd { .. }));
    assert!(matches!(err("(a"), SyntaxError::UnexpectedEnd { .. }));
    assert!(matches!(err("a b"), SyntaxError::Unexpected { at: 2, .. }));
    assert!(matches!(err("a)"), SyntaxError::Unexpected { at: 1, .. }));
    assert!(matches!(
        err("a % b"),
        SyntaxError::Unexpected { at: 2, .. }
    ));
    assert!(matches!(err("a == b"), SyntaxError::Unexpected { .. }));
    assert!(matches!(err("$.a"), SyntaxError::Unexpected { .. }));
    assert!(matches!(err("a.b"), SyntaxError::Unexpected { .. }));
    assert_eq!(err("1e3"), SyntaxError::BadNumber("1e3".into()));
    assert_eq!(err("1.2.3"), SyntaxError::BadNumber("1.2.3".into()));
    assert_eq!(err("sqrt(2)"), SyntaxError::UnknownFunction("sqrt".into()));
    assert_eq!(
        err("max(1)"),
        SyntaxError::Arity {
            name: "max",
            wanted: 2,
            got: 1
        }
    );
    assert!(matches!(err("abs(1, 2)"), SyntaxError::Arity { .. }));
    assert!(matches!(err("max()"), SyntaxError::Unexpected { .. }));
}

#[test]
fn length_and_depth_are_bounded() {
    assert_eq!(
        Expression::parse(&"1+".repeat(129)).unwrap_err(),
        SyntaxError::TooLong
    );
    assert_eq!(
        Expression::parse(&format!("{}1{}", "(".repeat(30), ")".repeat(30))).unwrap_err(),
        SyntaxError::TooDeep
    );
    assert_eq!(
        Expression::parse(&"-".repeat(200)).unwrap_err(),
        SyntaxError::TooDeep
    );
    assert_eq!(
        Expression::parse(&format!("1{}", "+1".repeat(70))).unwrap_err(),
        SyntaxError::TooDeep
    );
    // What a summary needs is far inside the bounds.
    assert_eq!(
        value("max(0, (190.00 - 120.00) * 2 - abs(-5.00)) / 1"),
        "135.00"
    );
}

/// Cents as the decimal string a shop would send: `-7000` is `"-70.00"`.
fn cents(n: i64) -> String {
    let sign = if n < 0 { "-" } else { "" };
    format!(
        "{sign}{}.{:02}",
        n.unsigned_abs() / 100,
        n.unsigned_abs() % 100
    )
}

proptest::proptest! {
    /// No text panics the parser, nor its value the evaluator; a value is a plain decimal.
    #[test]
    fn no_expression_panics(text in "[a-c0-9 .()+*/,-]{0,80}|(abs|max|min|[a-c])[(]{0,3}[-a-c0-9 .,()+*/]{0,40}", a in "-?[0-9]{1,30}(\\.[0-9]{1,30})?|x", b in -1_000_000i64..1_000_000) {
        if let Ok(expression) = Expression::parse(&text) {
            let values = terms(&[("a", json!(a)), ("b", json!(b)), ("c", json!("0.00"))]);
            if let Ok(Value::String(out)) = expression.evaluate(&values) {
                proptest::prop_assert!(decimal(&out).is_some(), "{} = {}", text, out);
            }
        }
    }

    /// Differences, sums and products of amounts are exact: what integer cents give.
    #[test]
    fn amounts_are_exact(x in -10_000_000_000i64..10_000_000_000, y in -10_000_000_000i64..10_000_000_000, n in 0i64..1000) {
        let values = terms(&[("x", json!(cents(x))), ("y", json!(cents(y))), ("n", json!(n))]);
        let run = |text: &str| Expression::parse(text).unwrap().evaluate(&values).unwrap();
        proptest::prop_assert_eq!(run("x - y"), json!(cents(x - y)));
        proptest::prop_assert_eq!(run("x + y"), json!(cents(x + y)));
        proptest::prop_assert_eq!(run("x * n"), json!(cents(x * n)));
        proptest::prop_assert_eq!(run("max(x, y)"), json!(cents(x.max(y))));
        proptest::prop_assert_eq!(run("abs(x - y)"), json!(cents((x - y).abs())));
    }
}

#[test]
fn lists_the_terms_it_reads() {
    let e = Expression::parse("max(b, a) - a * 2 + abs(c)").unwrap();
    assert_eq!(e.terms().into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(e.to_string(), "max(b, a) - a * 2 + abs(c)");
}
