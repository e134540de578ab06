//! Which CPUs each process may use. The proxy under test gets CPUs of its own; the
//! environment it is measured in (upstream, load generator, Redis) gets the others, the same
//! for every row, so rows differ only in what sits between the load and the upstream.

use std::fmt;

use serde::Serialize;

/// `taskset -c` lists; `None` everywhere when not pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuPlan {
    pub proxy: Option<String>,
    pub upstream: Option<String>,
    pub load: Option<String>,
    pub redis: Option<String>,
}

impl CpuPlan {
    /// The default plan for a machine with `cpus` CPUs (numbered from 0):
    /// 1: nothing pinned; 2: proxy on 0, everything else on 1; 3: proxy 0, upstream 1,
    /// load and Redis 2; 4+: proxy 0, upstream 1, load 2, Redis 3.
    pub fn default_for(cpus: usize) -> CpuPlan {
        let pin = |s: &str| Some(s.to_owned());
        match cpus {
            0 | 1 => CpuPlan::unpinned(),
            2 => CpuPlan {
                proxy: pin("0"),
                upstream: pin("1"),
                load: pin("1"),
                redis: pin("1"),
            },
            3 => CpuPlan {
                proxy: pin("0"),
                upstream: pin("1"),
                load: pin("2"),
                redis: pin("2"),
            },
            _ => CpuPlan {
                proxy: pin("0"),
                upstream: pin("1"),
                load: pin("2"),
                redis: pin("3"),
            },
        }
    }

    pub fn unpinned() -> CpuPlan {
        CpuPlan {
            proxy: None,
            upstream: None,
            load: None,
            redis: None,
        }
    }
}

impl fmt::Display for CpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |cpus: &Option<String>| cpus.clone().unwrap_or_else(|| "any".to_owned());
        write!(
            f,
            "proxy under test: CPU {}; upstream: CPU {}; load generator: CPU {}; redis-server: CPU {}",
            show(&self.proxy),
            show(&self.upstream),
            show(&self.load),
            show(&self.redis)
        )
    }
}

/// How many CPUs this process may run on (the standard library honours its affinity mask).
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cores_give_the_proxy_one_of_its_own() {
        let plan = CpuPlan::default_for(2);
        assert_eq!(plan.proxy.as_deref(), Some("0"));
        assert_eq!(plan.upstream.as_deref(), Some("1"));
        assert_eq!(plan.load, plan.redis);
        assert_eq!(CpuPlan::default_for(1), CpuPlan::unpinned());
        assert!(plan.to_string().contains("proxy under test: CPU 0"));
    }
}
