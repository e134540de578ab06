//! Money as integer cents, shown as decimal strings ("120.00").
//!
//! Integer cents keep the arithmetic exact (no floats near prices), and decimal
//! strings are how the API and the protocol's `terms` carry amounts.

use serde::Serialize;

/// The shop sells in one currency.
pub const CURRENCY: &str = "USD";

/// `12000` → `"120.00"`, `-7000` → `"-70.00"`.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// An amount with its currency, as the API returns prices and differences.
#[derive(Debug, Clone, Serialize)]
pub struct Amount {
    pub amount: String,
    pub currency: &'static str,
}

impl Amount {
    pub fn from_cents(cents: i64) -> Self {
        Self {
            amount: format_cents(cents),
            currency: CURRENCY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::format_cents;

    #[test]
    fn formats_decimal_strings() {
        assert_eq!(format_cents(12000), "120.00");
        assert_eq!(format_cents(7000), "70.00");
        assert_eq!(format_cents(5), "0.05");
        assert_eq!(format_cents(0), "0.00");
        assert_eq!(format_cents(-7000), "-70.00");
        assert_eq!(format_cents(-5), "-0.05");
    }
}
