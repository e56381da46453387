//! The tool registry: every tool linked into the binary, each tagged with its layer.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use strata_engine::config::ModuleConfigSource;
use strata_engine::{Component, ComponentKind, Layer, Tool, ToolRegistration, ToolSpec};
use strata_engine::{ToolContext, ToolError, ToolOutput};

/// A tool in the registry together with where it came from.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Its layer.
    pub layer: Layer,
    /// Crate that declared it (`runtime` for run-time registrations).
    pub origin: String,
}

impl RegisteredTool {
    /// The spec.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// The spec with its layer, as listed by `strata tools --json` and the control API.
    pub fn listing(&self) -> ToolListing<'_> {
        ToolListing {
            spec: self.tool.spec(),
            layer: &self.layer,
        }
    }
}

/// A [`ToolSpec`] plus its layer, serialised flat.
#[derive(Serialize)]
pub struct ToolListing<'a> {
    /// The spec.
    #[serde(flatten)]
    pub spec: &'a ToolSpec,
    /// `core`, `module:<name>`, `overlay` or `runtime`.
    pub layer: &'a Layer,
}

/// One tool hidden by a later layer, reported once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowing {
    /// Tool name.
    pub name: String,
    /// The layer whose tool is used.
    pub winner: String,
    /// The layer whose tool is hidden.
    pub hidden: String,
}

/// Problems building the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two tools of the same layer share a name: nothing says which should win.
    #[error(
        "two tools named `{name}` in the same layer ({layer}): from crates `{first}` and `{second}`; rename one"
    )]
    SameLayerDuplicate {
        /// Tool name.
        name: String,
        /// Layer of both.
        layer: String,
        /// First crate.
        first: String,
        /// Second crate.
        second: String,
    },
    /// A run-time registration reused a name.
    #[error("a tool named `{0}` is already registered; run-time registrations never override")]
    Duplicate(String),
    /// The spec's name and the registration's name differ (hand-written registration).
    #[error("registration `{registered}` builds a tool whose spec is named `{spec}`")]
    NameMismatch {
        /// Name in the registration.
        registered: String,
        /// Name in the spec.
        spec: String,
    },
    /// A declared module order names a module that is not linked.
    #[error(
        "module `{0}` is declared but not linked into this binary (no `declare_module!` found)"
    )]
    UnknownModule(String),
}

type BoxedHandler = Box<
    dyn Fn(
            ToolContext,
            Value,
        ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>
        + Send
        + Sync,
>;

/// A run-time tool made of a spec and a closure.
struct FnTool {
    spec: ToolSpec,
    handler: BoxedHandler,
}

#[async_trait::async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        (self.handler)(ctx.clone(), args).await
    }
}

/// Orders layers: core < modules (in declared order) < overlay < runtime.
fn rank(layer: &Layer, module_order: &[String]) -> usize {
    match layer {
        Layer::Core => 0,
        Layer::Module(m) => {
            1 + module_order
                .iter()
                .position(|x| x == m)
                .unwrap_or(usize::MAX / 4)
        }
        Layer::Overlay => usize::MAX / 2,
        Layer::Runtime => usize::MAX,
    }
}

/// The set of callable tools. Cheap to share (`Arc<Registry>`); run-time registrations take a
/// write lock, lookups a read lock.
pub struct Registry {
    tools: RwLock<BTreeMap<String, RegisteredTool>>,
    generation: std::sync::atomic::AtomicU64,
    shadowed: Vec<Shadowing>,
    modules: Vec<String>,
}

impl Registry {
    /// An empty registry (tests, embedders that register everything by hand).
    pub fn empty() -> Self {
        Registry {
            tools: RwLock::new(BTreeMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            shadowed: Vec::new(),
            modules: Vec::new(),
        }
    }

    /// Every module linked into this binary (`declare_module!`), as config sources, by name.
    pub fn linked_modules() -> Vec<ModuleConfigSource> {
        let mut v: Vec<_> = inventory::iter::<Component>
            .into_iter()
            .filter_map(|c| match c.kind {
                ComponentKind::Module {
                    name,
                    default_config,
                    validate,
                    config_dir,
                    skills_dir,
                } => Some(ModuleConfigSource {
                    name: name.to_owned(),
                    default_yaml: default_config,
                    validate,
                    config_dir: Some(config_dir.into()),
                    skills_dir: Some(skills_dir.into()),
                }),
                ComponentKind::Core => None,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v.dedup_by(|a, b| a.name == b.name);
        v
    }

    /// The linked modules' config sources in precedence order (see [`Self::module_order`]).
    pub fn module_sources(declared: &[String]) -> Result<Vec<ModuleConfigSource>, RegistryError> {
        let mut linked = Self::linked_modules();
        let order = Self::module_order(declared)?;
        let mut out = Vec::new();
        for name in order {
            if let Some(i) = linked.iter().position(|m| m.name == name) {
                out.push(linked.swap_remove(i));
            }
        }
        Ok(out)
    }

    /// Module names in precedence order: those in `declared` first, in that order, then any
    /// other linked module by name.
    pub fn module_order(declared: &[String]) -> Result<Vec<String>, RegistryError> {
        let linked: Vec<String> = Self::linked_modules().into_iter().map(|m| m.name).collect();
        let mut order = Vec::new();
        for d in declared {
            if !linked.contains(d) {
                return Err(RegistryError::UnknownModule(d.clone()));
            }
            if !order.contains(d) {
                order.push(d.clone());
            }
        }
        for l in linked {
            if !order.contains(&l) {
                order.push(l);
            }
        }
        Ok(order)
    }

    /// Every `#[tool]` linked into this binary as (tool name, source file it was declared in),
    /// shadowed ones included: what `strata doctor` compares an overlay's `src/tools/` with.
    pub fn linked_sources() -> Vec<(&'static str, &'static str)> {
        inventory::iter::<ToolRegistration>
            .into_iter()
            .map(|r| (r.name, r.file))
            .collect()
    }

    /// Builds the registry from every `#[tool]` linked into the binary.
    ///
    /// `declared_modules` is the module order the deployment declared (earlier loses).
    pub fn from_inventory(declared_modules: &[String]) -> Result<Self, RegistryError> {
        let module_order = Self::module_order(declared_modules)?;
        let components: Vec<&Component> = inventory::iter::<Component>.into_iter().collect();
        let entries = inventory::iter::<ToolRegistration>
            .into_iter()
            .map(|reg| {
                let layer = components
                    .iter()
                    .find(|c| c.crate_name == reg.crate_name)
                    .map_or(Layer::Overlay, |c| match &c.kind {
                        ComponentKind::Core => Layer::Core,
                        ComponentKind::Module { name, .. } => Layer::Module((*name).to_owned()),
                    });
                (reg, layer)
            })
            .collect::<Vec<_>>();
        Self::build(entries, module_order)
    }

    fn build(
        entries: Vec<(&ToolRegistration, Layer)>,
        module_order: Vec<String>,
    ) -> Result<Self, RegistryError> {
        // Sort by (name, rank) so that, per name, later layers come last and win.
        let mut entries = entries;
        entries.sort_by(|(a, la), (b, lb)| {
            a.name
                .cmp(b.name)
                .then(rank(la, &module_order).cmp(&rank(lb, &module_order)))
        });
        let mut tools: BTreeMap<String, RegisteredTool> = BTreeMap::new();
        let mut shadowed = Vec::new();
        for (reg, layer) in entries {
            let tool: Arc<dyn Tool> = Arc::from((reg.make)());
            if tool.spec().name != reg.name {
                return Err(RegistryError::NameMismatch {
                    registered: reg.name.to_owned(),
                    spec: tool.spec().name.clone(),
                });
            }
            let new = RegisteredTool {
                tool,
                layer,
                origin: reg.crate_name.to_owned(),
            };
            if let Some(old) = tools.get(reg.name) {
                if old.layer == new.layer {
                    return Err(RegistryError::SameLayerDuplicate {
                        name: reg.name.to_owned(),
                        layer: old.layer.to_string(),
                        first: old.origin.clone(),
                        second: new.origin.clone(),
                    });
                }
                shadowed.push(Shadowing {
                    name: reg.name.to_owned(),
                    winner: format!("{} ({})", new.layer, new.origin),
                    hidden: format!("{} ({})", old.layer, old.origin),
                });
            }
            tools.insert(reg.name.to_owned(), new);
        }
        for s in &shadowed {
            tracing::info!(
                tool = %s.name,
                winner = %s.winner,
                hidden = %s.hidden,
                "tool shadowed by a later layer"
            );
        }
        Ok(Registry {
            tools: RwLock::new(tools),
            generation: std::sync::atomic::AtomicU64::new(0),
            shadowed,
            modules: module_order,
        })
    }

    /// Registers a tool at run time from its spec and an async handler (MCP client tools,
    /// embedders). Arguments are checked against `spec.input_schema` before the handler runs.
    /// A name already present is an error: run-time registration never silently overrides.
    ///
    /// ```
    /// # use strata_engine::{ToolOutput, ToolSpec};
    /// # use strata_runtime::Registry;
    /// let reg = Registry::empty();
    /// let spec = ToolSpec::new("echo", "Returns its arguments.", serde_json::json!({"type": "object"}));
    /// reg.register(spec, |_ctx, args| async move { Ok(ToolOutput(args)) }).unwrap();
    /// assert!(reg.get("echo").is_some());
    /// ```
    pub fn register<F, Fut>(&self, spec: ToolSpec, handler: F) -> Result<(), RegistryError>
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.register_tool(Arc::new(FnTool {
            spec,
            handler: Box::new(move |ctx, args| Box::pin(handler(ctx, args))),
        }))
    }

    /// Registers a hand-written [`Tool`] at run time. Same rules as [`Self::register`].
    pub fn register_tool(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.insert_runtime(tool, false)
    }

    /// Registers a run-time tool, replacing the run-time tool of the same name if there is one
    /// (a reloaded command skill). A name held by a compiled-in tool is an error.
    pub fn replace_runtime(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.insert_runtime(tool, true)
    }

    fn insert_runtime(&self, tool: Arc<dyn Tool>, replace: bool) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        let mut map = self.tools.write().unwrap_or_else(|p| p.into_inner());
        let taken = map
            .get(&name)
            .is_some_and(|t| !replace || t.layer != Layer::Runtime);
        if taken {
            return Err(RegistryError::Duplicate(name));
        }
        map.insert(
            name,
            RegisteredTool {
                tool,
                layer: Layer::Runtime,
                origin: "runtime".to_owned(),
            },
        );
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Removes a run-time tool (e.g. an MCP server that went away). Returns whether it existed.
    pub fn unregister(&self, name: &str) -> bool {
        let mut map = self.tools.write().unwrap_or_else(|p| p.into_inner());
        match map.get(name) {
            Some(t) if t.layer == Layer::Runtime => {
                self.generation
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                map.remove(name).is_some()
            }
            _ => false,
        }
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<RegisteredTool> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Every tool, sorted by name.
    pub fn list(&self) -> Vec<RegisteredTool> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Changes whenever a run-time tool is added or removed (for caches of the tool list).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tools hidden by a later layer at build time.
    pub fn shadowed(&self) -> &[Shadowing] {
        &self.shadowed
    }

    /// Module precedence order used at build time.
    pub fn modules(&self) -> &[String] {
        &self.modules
    }
}

impl strata_engine::ToolDirectory for Registry {
    fn specs(&self) -> Vec<ToolSpec> {
        self.list().iter().map(|t| t.spec().clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    struct Named(ToolSpec);

    #[async_trait]
    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(
            &self,
            _: &ToolContext,
            _: serde_json::Value,
        ) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput(serde_json::Value::Null))
        }
    }

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: serde_json::json!({"type": "object"}),
            capabilities: vec![],
            side_effects: Default::default(),
            hitl: false,
            web_facing: false,
            idempotent: false,
            trusted_fields: vec![],
            timeout: None,
        }
    }

    fn make_core() -> Box<dyn Tool> {
        Box::new(Named(spec("dup", "core")))
    }
    fn make_a() -> Box<dyn Tool> {
        Box::new(Named(spec("dup", "module a")))
    }
    fn make_b() -> Box<dyn Tool> {
        Box::new(Named(spec("dup", "module b")))
    }
    fn make_overlay() -> Box<dyn Tool> {
        Box::new(Named(spec("dup", "overlay")))
    }

    fn reg(crate_name: &'static str, make: fn() -> Box<dyn Tool>) -> ToolRegistration {
        ToolRegistration {
            crate_name,
            name: "dup",
            make,
            file: file!(),
        }
    }

    #[test]
    fn later_layers_win_in_declared_module_order() {
        let (c, a, b, o) = (
            reg("core", make_core),
            reg("a", make_a),
            reg("b", make_b),
            reg("ov", make_overlay),
        );
        let order = vec!["b".to_owned(), "a".to_owned()];
        let mk = |with_overlay: bool| {
            let mut e = vec![
                (&a, Layer::Module("a".into())),
                (&c, Layer::Core),
                (&b, Layer::Module("b".into())),
            ];
            if with_overlay {
                e.push((&o, Layer::Overlay));
            }
            Registry::build(e, order.clone()).expect("build")
        };
        let r = mk(false);
        // Declared order b, a: a is later, so a wins.
        assert_eq!(r.get("dup").expect("dup").spec().description, "module a");
        assert_eq!(r.shadowed().len(), 2);
        let r = mk(true);
        let t = r.get("dup").expect("dup");
        assert_eq!(t.layer, Layer::Overlay);
        assert_eq!(r.shadowed().last().expect("one").winner, "overlay (ov)");
        assert_eq!(r.shadowed().last().expect("one").hidden, "module:a (a)");
    }

    #[test]
    fn same_layer_duplicate_is_an_error() {
        let (a, b) = (reg("x", make_a), reg("y", make_b));
        let err = Registry::build(vec![(&a, Layer::Core), (&b, Layer::Core)], vec![])
            .err()
            .expect("must fail");
        assert!(
            matches!(err, RegistryError::SameLayerDuplicate { .. }),
            "{err}"
        );
    }

    #[test]
    fn runtime_registration_never_overrides() {
        let r = Registry::empty();
        r.register_tool(Arc::new(Named(spec("t", "one"))))
            .expect("first");
        let err = r
            .register(spec("t", "two"), |_, _| async {
                Ok(ToolOutput(serde_json::Value::Null))
            })
            .expect_err("dup");
        assert_eq!(err, RegistryError::Duplicate("t".into()));
        assert_eq!(r.get("t").expect("t").spec().description, "one");
        assert_eq!(r.get("t").expect("t").layer, Layer::Runtime);
        assert!(r.unregister("t"));
        assert!(r.get("t").is_none());
    }

    #[tokio::test]
    async fn runtime_tools_run_through_the_invoker_with_schema_checks() {
        use crate::{Invocation, Invoker, Status};
        use strata_engine::audit::NoAudit;
        use strata_engine::{Env, Principal};
        let r = Arc::new(Registry::empty());
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": false
        });
        r.register(
            ToolSpec::new("double", "Doubles n.", schema),
            |_ctx, args| async move {
                let n = args["n"].as_i64().unwrap_or_default();
                Ok(ToolOutput(serde_json::json!(n * 2)))
            },
        )
        .expect("register");
        let dir = std::env::temp_dir();
        let env = Arc::new(Env::new(Default::default(), dir.clone(), dir));
        let inv = Invoker::new(r, env, Arc::new(NoAudit));
        let ok = inv
            .invoke(Invocation::new(
                "double",
                serde_json::json!({"n": 21}),
                Principal::Operator,
            ))
            .await;
        assert_eq!(ok.value, serde_json::json!(42));
        let bad = inv
            .invoke(Invocation::new(
                "double",
                serde_json::json!({"n": "x"}),
                Principal::Operator,
            ))
            .await;
        assert_eq!(bad.status, Status::ValidationError);
        assert!(bad.error.expect("msg").contains("`n`"));
    }

    #[test]
    fn list_is_sorted_by_name() {
        let r = Registry::empty();
        for n in ["zeta", "alpha", "mid"] {
            r.register_tool(Arc::new(Named(spec(n, n)))).expect("reg");
        }
        let names: Vec<_> = r.list().iter().map(|t| t.spec().name.clone()).collect();
        assert_eq!(names, ["alpha", "mid", "zeta"]);
    }
}
