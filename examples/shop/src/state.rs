//! The shop's data and the two actions it performs: exchanging an item and
//! cancelling an order.
//!
//! Everything lives in memory and is seeded at start, so every run of the demo
//! begins from the same orders. The actions are deliberately naive: no
//! idempotency keys, no duplicate detection. A repeated request is performed
//! again, as in many real legacy APIs; preventing that is the gateway's job.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::money::{Amount, format_cents};

/// A product the shop sells, by SKU.
#[derive(Debug, Clone)]
pub struct Product {
    pub name: &'static str,
    pub price_cents: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    Placed,
    Cancelled,
}

#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub item_id: String,
    pub sku: String,
    pub name: String,
    /// Decimal string in [`crate::money::CURRENCY`], e.g. `"120.00"`.
    pub price: String,
    #[serde(skip)]
    pub price_cents: i64,
}

/// One performed exchange, as returned by `POST /orders/{id}/exchanges` and
/// listed in the order's `exchanges`.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub exchange_id: String,
    pub order_id: String,
    pub item_id: String,
    pub from_sku: String,
    pub to_sku: String,
    /// New price minus old price; negative means money back.
    pub price_difference: Amount,
}

#[derive(Debug, Clone, Serialize)]
pub struct Order {
    pub id: String,
    pub customer: String,
    pub status: OrderStatus,
    pub currency: &'static str,
    pub items: Vec<Item>,
    pub exchanges: Vec<Exchange>,
}

/// How many times each action was really performed. The demo and the tests
/// read this to show that an approved operation ran exactly once.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stats {
    pub exchanges: u64,
    pub cancellations: u64,
}

/// Why an action was refused; mapped to an HTTP status in `routes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShopError {
    NotFound(String),
    Conflict(String),
}

#[derive(Debug)]
pub struct Shop {
    catalog: BTreeMap<&'static str, Product>,
    orders: BTreeMap<String, Order>,
    stats: Stats,
    /// Source of `exg_N` ids; never reused within a run.
    next_exchange: u64,
}

impl Shop {
    /// The demo's starting state: Ada's order with the Stormline Jacket from the
    /// spec's jacket-exchange example, a second order to cancel, a third for MCP, and a
    /// fourth for the conversation.
    pub fn seeded() -> Self {
        let catalog: BTreeMap<&'static str, Product> = [
            ("stormline-m", "Stormline Jacket (M)", 12000),
            ("stormline-l", "Stormline Jacket (L)", 12000),
            (
                "stormline-insulated-m",
                "Stormline Insulated Jacket (M)",
                19000,
            ),
            (
                "stormline-insulated-l",
                "Stormline Insulated Jacket (L)",
                19000,
            ),
            ("socks-trail", "Trail Socks", 1200),
            ("socks-wool", "Wool Hiking Socks", 1800),
            ("hat-rain", "Rain Hat", 2500),
        ]
        .into_iter()
        .map(|(sku, name, price_cents)| (sku, Product { name, price_cents }))
        .collect();

        let mut shop = Self {
            catalog,
            orders: BTreeMap::new(),
            stats: Stats::default(),
            next_exchange: 1,
        };
        shop.seed_order(
            "ord_7Hk2",
            "Ada",
            &[("itm_4Qa", "stormline-m"), ("itm_8Rc", "socks-trail")],
        );
        shop.seed_order("ord_3Lm9", "Ada", &[("itm_2Xy", "hat-rain")]);
        // Its own order for the MCP walkthrough (docs/mcp.md), so that the
        // walkthroughs (README.md, docs/demo.md), run in order, each act on an order and item of their own.
        shop.seed_order("ord_5Nc8", "Ada", &[("itm_6Wd", "stormline-l")]);
        // And one for the conversation walkthrough (examples/company, docs/demo.md).
        shop.seed_order("ord_2Cv6", "Ada", &[("itm_5Tz", "stormline-m")]);
        // And one for the approval page walkthrough (an agent without the extension).
        shop.seed_order("ord_9Pg4", "Ada", &[("itm_3Hb", "stormline-m")]);
        shop
    }

    fn seed_order(&mut self, id: &str, customer: &str, items: &[(&str, &str)]) {
        let items = items
            .iter()
            .filter_map(|&(item_id, sku)| {
                let product = self.catalog.get(sku)?;
                Some(Item {
                    item_id: item_id.to_owned(),
                    sku: sku.to_owned(),
                    name: product.name.to_owned(),
                    price: format_cents(product.price_cents),
                    price_cents: product.price_cents,
                })
            })
            .collect();
        let order = Order {
            id: id.to_owned(),
            customer: customer.to_owned(),
            status: OrderStatus::Placed,
            currency: crate::money::CURRENCY,
            items,
            exchanges: Vec::new(),
        };
        self.orders.insert(id.to_owned(), order);
    }

    pub fn order(&self, order_id: &str) -> Result<&Order, ShopError> {
        self.orders
            .get(order_id)
            .ok_or_else(|| ShopError::NotFound(format!("no order {order_id}")))
    }

    /// One item of an order, as it is now (after any exchange, the new product and price).
    pub fn item(&self, order_id: &str, item_id: &str) -> Result<&Item, ShopError> {
        self.order(order_id)?
            .items
            .iter()
            .find(|item| item.item_id == item_id)
            .ok_or_else(|| ShopError::NotFound(format!("no item {item_id} on order {order_id}")))
    }

    pub fn product(&self, sku: &str) -> Result<&Product, ShopError> {
        self.catalog
            .get(sku)
            .ok_or_else(|| ShopError::NotFound(format!("no product with sku {sku}")))
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Replaces an item with another SKU and records the exchange. Performed
    /// every time it is called, even with the same arguments.
    pub fn exchange(
        &mut self,
        order_id: &str,
        item_id: &str,
        replacement_sku: &str,
    ) -> Result<Exchange, ShopError> {
        // Look everything up before changing anything, so a refusal leaves no trace.
        let (to_name, to_price) = {
            let product = self.product(replacement_sku)?;
            (product.name, product.price_cents)
        };
        let exchange_id = format!("exg_{}", self.next_exchange);
        let order = self
            .orders
            .get_mut(order_id)
            .ok_or_else(|| ShopError::NotFound(format!("no order {order_id}")))?;
        if order.status == OrderStatus::Cancelled {
            return Err(ShopError::Conflict(format!(
                "order {order_id} is cancelled"
            )));
        }
        let item = order
            .items
            .iter_mut()
            .find(|item| item.item_id == item_id)
            .ok_or_else(|| ShopError::NotFound(format!("no item {item_id} on order {order_id}")))?;

        let exchange = Exchange {
            exchange_id,
            order_id: order_id.to_owned(),
            item_id: item_id.to_owned(),
            from_sku: std::mem::replace(&mut item.sku, replacement_sku.to_owned()),
            to_sku: replacement_sku.to_owned(),
            price_difference: Amount::from_cents(to_price - item.price_cents),
        };
        item.name = to_name.to_owned();
        item.price = format_cents(to_price);
        item.price_cents = to_price;
        order.exchanges.push(exchange.clone());

        self.next_exchange += 1;
        self.stats.exchanges += 1;
        Ok(exchange)
    }

    /// Cancels an order. The reason is only logged: the legacy API keeps no
    /// more than that.
    pub fn cancel(&mut self, order_id: &str) -> Result<&Order, ShopError> {
        let order = self
            .orders
            .get_mut(order_id)
            .ok_or_else(|| ShopError::NotFound(format!("no order {order_id}")))?;
        if order.status == OrderStatus::Cancelled {
            return Err(ShopError::Conflict(format!(
                "order {order_id} is already cancelled"
            )));
        }
        order.status = OrderStatus::Cancelled;
        self.stats.cancellations += 1;
        Ok(order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_changes_the_item_and_counts() {
        let mut shop = Shop::seeded();
        let exg = shop
            .exchange("ord_7Hk2", "itm_4Qa", "stormline-insulated-m")
            .unwrap();
        assert_eq!(exg.exchange_id, "exg_1");
        assert_eq!(exg.from_sku, "stormline-m");
        assert_eq!(exg.price_difference.amount, "70.00");

        let order = shop.order("ord_7Hk2").unwrap();
        assert_eq!(order.items[0].sku, "stormline-insulated-m");
        assert_eq!(order.items[0].name, "Stormline Insulated Jacket (M)");
        assert_eq!(order.items[0].price, "190.00");
        assert_eq!(order.exchanges.len(), 1);
        assert_eq!(shop.stats().exchanges, 1);
    }

    #[test]
    fn refusals_change_nothing() {
        let mut shop = Shop::seeded();
        assert!(matches!(
            shop.exchange("ord_7Hk2", "itm_4Qa", "no-such-sku"),
            Err(ShopError::NotFound(_))
        ));
        assert!(matches!(
            shop.exchange("ord_7Hk2", "itm_nope", "stormline-l"),
            Err(ShopError::NotFound(_))
        ));
        shop.cancel("ord_3Lm9").unwrap();
        assert!(matches!(
            shop.cancel("ord_3Lm9"),
            Err(ShopError::Conflict(_))
        ));
        assert!(matches!(
            shop.exchange("ord_3Lm9", "itm_2Xy", "socks-trail"),
            Err(ShopError::Conflict(_))
        ));
        assert_eq!(shop.stats().exchanges, 0);
        assert_eq!(shop.stats().cancellations, 1);
        assert_eq!(shop.order("ord_7Hk2").unwrap().items[0].sku, "stormline-m");
    }

    #[test]
    fn a_repeated_exchange_is_performed_again() {
        // The legacy API has no duplicate detection; this is what the gateway fixes.
        let mut shop = Shop::seeded();
        shop.exchange("ord_7Hk2", "itm_4Qa", "stormline-l").unwrap();
        let second = shop.exchange("ord_7Hk2", "itm_4Qa", "stormline-l").unwrap();
        assert_eq!(second.exchange_id, "exg_2");
        assert_eq!(second.price_difference.amount, "0.00");
        assert_eq!(shop.stats().exchanges, 2);
    }
}
