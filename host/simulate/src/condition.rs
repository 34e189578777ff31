//! `--fail-if` conditions: `dead > 0`, `drain_s > 120`, `peak_retry_rate > 2x publish_rate`:
//! a figure of the report, a comparison, and a number or a multiple of another figure. A
//! CI job gates a policy's change on them.

use crate::Report;

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

/// What a figure is compared with.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Number(f64),
    /// `factor` times another figure.
    Times(f64, String),
}

/// One parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    text: String,
    metric: String,
    op: Op,
    bound: Bound,
}

/// A condition that does not parse: what was expected.
#[derive(Debug, thiserror::Error)]
#[error("--fail-if `{condition}`: {message}")]
pub struct ConditionError {
    /// The condition as given.
    pub condition: String,
    /// What is wrong.
    pub message: String,
}

impl Condition {
    /// Parse `text` (`METRIC OP VALUE`, VALUE a number or `Nx METRIC`).
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        let err = |message: String| ConditionError {
            condition: text.chars().take(200).collect(),
            message,
        };
        let ops = [
            (">=", Op::Ge),
            ("<=", Op::Le),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            (">", Op::Gt),
            ("<", Op::Lt),
        ];
        let Some((at, symbol, op)) = ops
            .iter()
            .filter_map(|(s, op)| text.find(s).map(|at| (at, *s, *op)))
            .min_by_key(|(at, s, _)| (*at, usize::MAX - s.len()))
        else {
            return Err(err(
                "expected `METRIC OP VALUE`, OP one of > >= < <= == !=".into()
            ));
        };
        let metric = text[..at].trim().to_string();
        let value = text[at + symbol.len()..].trim();
        let known = |name: &str| -> Result<(), ConditionError> {
            if Report::METRICS.contains(&name) {
                Ok(())
            } else {
                Err(err(format!(
                    "`{name}` is not a figure of the report (one of: {})",
                    Report::METRICS.join(", ")
                )))
            }
        };
        known(&metric)?;
        let bound = if let Ok(n) = value.parse::<f64>() {
            Bound::Number(n)
        } else if let Some((factor, other)) = value.split_once('x') {
            let factor = factor.trim().parse::<f64>().map_err(|_| {
                err(format!(
                    "`{value}`: expected a number, or `Nx METRIC` like `2x publish_rate`"
                ))
            })?;
            let other = other.trim().to_string();
            known(&other)?;
            Bound::Times(factor, other)
        } else {
            return Err(err(format!(
                "`{value}`: expected a number, or `Nx METRIC` like `2x publish_rate`"
            )));
        };
        Ok(Condition {
            text: text.trim().to_string(),
            metric,
            op,
            bound,
        })
    }

    /// Whether the condition holds for `report`, with the figures it compared, as text
    /// (`dead > 0: 12 > 0`).
    pub fn check(&self, report: &Report) -> (bool, String) {
        let left = report.metric(&self.metric).unwrap_or(f64::NAN);
        let right = match &self.bound {
            Bound::Number(n) => *n,
            Bound::Times(f, other) => f * report.metric(other).unwrap_or(f64::NAN),
        };
        let holds = match self.op {
            Op::Gt => left > right,
            Op::Ge => left >= right,
            Op::Lt => left < right,
            Op::Le => left <= right,
            Op::Eq => left == right,
            Op::Ne => left != right,
        };
        let symbol = match self.op {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        };
        (holds, format!("{}: {left} {symbol} {right}", self.text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_and_name_what_is_wrong() {
        let c = Condition::parse("peak_retry_rate >= 2x publish_rate").unwrap();
        assert_eq!(c.metric, "peak_retry_rate");
        assert_eq!(c.op, Op::Ge);
        assert_eq!(c.bound, Bound::Times(2.0, "publish_rate".into()));
        assert_eq!(
            Condition::parse("dead>0").unwrap().bound,
            Bound::Number(0.0)
        );
        let e = Condition::parse("deaths > 0").unwrap_err();
        assert!(e.message.contains("`deaths` is not a figure"), "{e}");
        let e = Condition::parse("dead 0").unwrap_err();
        assert!(e.message.contains("METRIC OP VALUE"), "{e}");
        let e = Condition::parse("dead > many").unwrap_err();
        assert!(e.message.contains("`many`"), "{e}");
    }
}
