//! Conditions: the grammar, exact comparisons, values that have none, and the bounds.

use super::*;
use crate::policy::Expression;
use crate::testkit::terms;
use serde_json::{Value, json};

fn holds(text: &str, pairs: &[(&str, Value)]) -> Result<bool, EvalError> {
    Condition::parse(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .evaluate(&terms(pairs))
}

fn err(text: &str) -> SyntaxError {
    Condition::parse(text).unwrap_err()
}

#[test]
fn the_demo_exchange_is_held_only_when_dearer() {
    let difference = |d: &str| holds("difference > 0", &[("difference", json!(d))]);
    assert_eq!(difference("70.00"), Ok(true));
    assert_eq!(difference("0.00"), Ok(false));
    assert_eq!(difference("-20.00"), Ok(false));
    assert_eq!(difference("0.01"), Ok(true));
    // Over a computed expression too.
    let pair = |a: &str, b: &str| {
        holds(
            "replacement_price - item_price > 0.00",
            &[("replacement_price", json!(a)), ("item_price", json!(b))],
        )
    };
    assert_eq!(pair("190.00", "120.00"), Ok(true));
    assert_eq!(pair("120.00", "120"), Ok(false));
}

#[test]
fn comparisons_are_exact_and_ignore_the_scale() {
    let amount = |a: Value| holds("amount >= 50.00", &[("amount", a)]);
    assert_eq!(amount(json!("50")), Ok(true));
    assert_eq!(amount(json!("50.000")), Ok(true));
    assert_eq!(amount(json!("49.999999999999999999")), Ok(false));
    assert_eq!(amount(json!(50)), Ok(true));
    assert_eq!(amount(json!(49.99)), Ok(false));
    assert_eq!(holds("1.0 == 1.00", &[]), Ok(true));
    assert_eq!(holds("1.0 != 1.00", &[]), Ok(false));
    assert_eq!(holds("0.1 + 0.2 == 0.3", &[]), Ok(true));
    assert_eq!(holds("-1 < 0", &[]), Ok(true));
    assert_eq!(holds("2 <= 2", &[]), Ok(true));
    assert_eq!(holds("2 < 2", &[]), Ok(false));
    assert_eq!(holds("3 > 2", &[]), Ok(true));
}

#[test]
fn not_binds_tightest_then_and_then_or() {
    assert_eq!(holds("1 > 0 or 1 > 0 and 0 > 1", &[]), Ok(true));
    assert_eq!(holds("(1 > 0 or 1 > 0) and 0 > 1", &[]), Ok(false));
    assert_eq!(holds("not 0 > 1 and 1 > 0", &[]), Ok(true));
    assert_eq!(holds("not (1 > 0 and 0 > 1)", &[]), Ok(true));
    assert_eq!(holds("not not 1 > 0", &[]), Ok(true));
    // A parenthesis opens an expression as well as a condition.
    assert_eq!(holds("(2 - 1) * 3 > 2", &[]), Ok(true));
    assert_eq!(holds("((2 - 1)) > 0 and (1 > 0)", &[]), Ok(true));
    assert_eq!(holds("(1) == 1", &[]), Ok(true));
}

#[test]
fn a_condition_without_a_value_is_an_error_never_false() {
    // Every comparison is evaluated: a missing term is an error even where the other
    // side alone would decide.
    assert_eq!(
        holds("amount > 50 or 1 > 0", &[]),
        Err(EvalError::Missing {
            term: "amount".into()
        })
    );
    assert_eq!(
        holds("0 > 1 and amount > 50", &[]),
        Err(EvalError::Missing {
            term: "amount".into()
        })
    );
    assert_eq!(
        holds("amount > 50", &[("amount", Value::Null)]),
        Err(EvalError::Missing {
            term: "amount".into()
        })
    );
    assert_eq!(
        holds("amount > 50", &[("amount", json!("fifty"))]),
        Err(EvalError::NotANumber {
            term: "amount".into()
        })
    );
    assert_eq!(
        holds("not amount / 0 > 1", &[("amount", json!("1"))]),
        Err(EvalError::DivisionByZero)
    );
    let big = "79228162514264337593543950335";
    assert_eq!(
        holds(&format!("{big} + 1 > 0"), &[]),
        Err(EvalError::Overflow)
    );
}

#[test]
fn syntax_errors() {
    assert_eq!(err(""), SyntaxError::Empty);
    // A condition compares: a bare expression is not one.
    assert!(matches!(
        err("difference"),
        SyntaxError::UnexpectedEnd { .. }
    ));
    assert!(matches!(
        err("difference + 1"),
        SyntaxError::UnexpectedEnd { .. }
    ));
    assert!(matches!(
        err("a > 0 b"),
        SyntaxError::Unexpected { at: 6, .. }
    ));
    assert!(matches!(
        err("a > b > c"),
        SyntaxError::Unexpected { at: 6, .. }
    ));
    assert!(matches!(
        err("a = b"),
        SyntaxError::Unexpected { at: 2, .. }
    ));
    assert!(matches!(
        err("a ! b"),
        SyntaxError::Unexpected { at: 2, .. }
    ));
    assert!(matches!(
        err("a > 0 and"),
        SyntaxError::UnexpectedEnd { .. }
    ));
    assert!(matches!(
        err("a > 0 &&  b > 0"),
        SyntaxError::Unexpected { .. }
    ));
    assert!(matches!(
        err("(a > 0"),
        SyntaxError::Unexpected { at: 3, .. }
    ));
    assert!(matches!(err("(a > 0) > 1"), SyntaxError::Unexpected { .. }));
    assert!(matches!(
        err("a > and"),
        SyntaxError::Unexpected { at: 4, .. }
    ));
    assert!(matches!(err("not > 1"), SyntaxError::Unexpected { .. }));
    assert_eq!(err("a > 1e3"), SyntaxError::BadNumber("1e3".into()));
    assert_eq!(
        err("sqrt(a) > 1"),
        SyntaxError::UnknownFunction("sqrt".into())
    );
    // An expression (a computed term) never compares.
    assert!(matches!(
        Expression::parse("a > b").unwrap_err(),
        SyntaxError::Unexpected { at: 2, .. }
    ));
}

#[test]
fn length_and_depth_are_bounded() {
    assert_eq!(
        err(&format!("{} 1 > 0", "not ".repeat(64))),
        SyntaxError::TooLong
    );
    assert_eq!(
        err(&format!("{}1 > 0", "not ".repeat(62))),
        SyntaxError::TooDeep
    );
    assert_eq!(
        err(&format!("{}1 > 0{}", "(".repeat(40), ")".repeat(40))),
        SyntaxError::TooDeep
    );
    // What a policy needs is far inside the bounds.
    assert_eq!(
        holds(
            "(difference > 0 and not abs(difference) < 0.01) or (quantity >= 10 and total >= 500.00)",
            &[
                ("difference", json!("5.00")),
                ("quantity", json!(1)),
                ("total", json!("10"))
            ]
        ),
        Ok(true)
    );
}

#[test]
fn lists_the_terms_it_reads() {
    let c = Condition::parse("b - a > 0 and not c == max(a, d)").unwrap();
    assert_eq!(
        c.terms().into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
    assert_eq!(c.to_string(), "b - a > 0 and not c == max(a, d)");
}

proptest::proptest! {
    /// No text panics the parser, nor the evaluator.
    #[test]
    fn no_condition_panics(text in "[a-c0-9 .()<>=!+*/,-]{0,80}|(not |[(])*[a-c0-9 ()<>=!.+-]{0,30}( and | or )[a-c0-9 ()<>=!.+-]{0,30}", a in "-?[0-9]{1,30}(\\.[0-9]{1,30})?|x") {
        if let Ok(condition) = Condition::parse(&text) {
            let values = terms(&[("a", json!(a)), ("b", json!("1.00")), ("c", json!("0"))]);
            let _ = condition.evaluate(&values);
        }
    }

    /// Comparisons of amounts are those of integer cents.
    #[test]
    fn comparisons_are_those_of_cents(x in -10_000_000_000i64..10_000_000_000, y in -10_000_000_000i64..10_000_000_000) {
        let cents = |n: i64| format!("{}{}.{:02}", if n < 0 { "-" } else { "" }, n.unsigned_abs() / 100, n.unsigned_abs() % 100);
        let values = terms(&[("x", json!(cents(x))), ("y", json!(cents(y)))]);
        let run = |text: &str| Condition::parse(text).unwrap().evaluate(&values).unwrap();
        proptest::prop_assert_eq!(run("x < y"), x < y);
        proptest::prop_assert_eq!(run("x >= y"), x >= y);
        proptest::prop_assert_eq!(run("x - y > 0"), x > y);
        proptest::prop_assert_eq!(run("x == y or x != y"), true);
    }
}
