//! `#[tool]`: turns an `async fn` into a registered Strata tool.
//!
//! Use it through `strata_engine::tool` (the engine re-exports it together with every crate the
//! generated code needs, so a tool crate depends on `strata-engine` and `serde` only). The
//! generated code:
//!
//! * keeps the function as written (minus the `///` comments on its parameters, which become
//!   property descriptions),
//! * declares a hidden arguments struct deriving `Deserialize` + `JsonSchema`
//!   (`deny_unknown_fields`), so the tool's input JSON Schema *is* its signature,
//! * implements `strata_engine::Tool` for a hidden unit type and submits it to `inventory`.
//!
//! See `docs/TOOLS.md` for the attribute's options.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, Meta, Pat, PathArguments, ReturnType,
    Type, parse_macro_input,
};

/// Capability names accepted in `capabilities = [...]`, with the engine variant they map to.
const CAPABILITIES: &[(&str, &str)] = &[
    ("read", "Read"),
    ("file-write", "FileWrite"),
    ("network", "Network"),
    ("subprocess", "Subprocess"),
    ("memory", "Memory"),
    ("messaging", "Messaging"),
    ("secrets", "Secrets"),
];

const SIDE_EFFECTS: &[(&str, &str)] = &[
    ("none", "None"),
    ("local", "Local"),
    ("external", "External"),
];

#[derive(Default)]
struct ToolArgs {
    name: Option<LitStr>,
    capabilities: Vec<(String, Span)>,
    side_effects: Option<(String, Span)>,
    hitl: bool,
    web_facing: bool,
    idempotent: bool,
    timeout_secs: Option<u64>,
}

/// Reads `foo`, `foo_bar`, `"foo-bar"` as the normalised name `foo-bar`.
fn word(expr: &Expr) -> syn::Result<(String, Span)> {
    match expr {
        Expr::Path(p) if p.path.get_ident().is_some() => {
            let id = p
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            Ok((id.replace('_', "-"), p.span()))
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok((s.value().replace('_', "-"), s.span())),
        other => Err(syn::Error::new(
            other.span(),
            "expected a name such as `read` or \"file-write\"",
        )),
    }
}

fn parse_tool_args(attr: TokenStream) -> syn::Result<ToolArgs> {
    let mut out = ToolArgs::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            out.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("capabilities") {
            let expr: Expr = meta.value()?.parse()?;
            let Expr::Array(arr) = expr else {
                return Err(meta.error("expected a list, e.g. `capabilities = [read, network]`"));
            };
            for e in &arr.elems {
                let (w, span) = word(e)?;
                if !CAPABILITIES.iter().any(|(n, _)| *n == w) {
                    let known: Vec<_> = CAPABILITIES.iter().map(|(n, _)| *n).collect();
                    return Err(syn::Error::new(
                        span,
                        format!("unknown capability `{w}`; known: {}", known.join(", ")),
                    ));
                }
                out.capabilities.push((w, span));
            }
        } else if meta.path.is_ident("side_effects") {
            let expr: Expr = meta.value()?.parse()?;
            let (w, span) = word(&expr)?;
            if !SIDE_EFFECTS.iter().any(|(n, _)| *n == w) {
                return Err(syn::Error::new(
                    span,
                    "side_effects must be one of `none`, `local`, `external`",
                ));
            }
            out.side_effects = Some((w, span));
        } else if meta.path.is_ident("hitl") {
            out.hitl = parse_flag(&meta)?;
        } else if meta.path.is_ident("web_facing") {
            out.web_facing = parse_flag(&meta)?;
        } else if meta.path.is_ident("idempotent") {
            out.idempotent = parse_flag(&meta)?;
        } else if meta.path.is_ident("timeout_secs") {
            let lit: syn::LitInt = meta.value()?.parse()?;
            let secs: u64 = lit.base10_parse()?;
            if secs == 0 {
                return Err(syn::Error::new(
                    lit.span(),
                    "timeout_secs must be at least 1",
                ));
            }
            out.timeout_secs = Some(secs);
        } else {
            return Err(meta.error(
                "unknown #[tool] option; expected one of: name, capabilities, side_effects, hitl, \
                 web_facing, idempotent, timeout_secs",
            ));
        }
        Ok(())
    });
    syn::parse::Parser::parse(parser, attr)?;
    Ok(out)
}

/// `hitl` alone means true; `hitl = false` is accepted too.
fn parse_flag(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.peek(syn::Token![=]) {
        let b: syn::LitBool = meta.value()?.parse()?;
        Ok(b.value)
    } else {
        Ok(true)
    }
}

/// Joins `///` lines the way rustdoc shows them: one leading space dropped, lines kept.
fn doc_text(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for a in attrs {
        if !a.path().is_ident("doc") {
            continue;
        }
        if let Meta::NameValue(nv) = &a.meta
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
        {
            let v = s.value();
            lines.push(v.strip_prefix(' ').unwrap_or(&v).trim_end().to_owned());
        }
    }
    // As rustdoc renders it: lines of a paragraph run together, paragraphs stay apart.
    let text = lines
        .join("\n")
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    (!text.is_empty()).then_some(text)
}

/// Is this parameter `&ToolContext` (any path ending in `ToolContext`)?
fn is_context(ty: &Type) -> bool {
    if let Type::Reference(r) = ty
        && let Type::Path(p) = r.elem.as_ref()
    {
        return p.path.segments.last().is_some_and(|s| {
            s.ident == "ToolContext" && matches!(s.arguments, PathArguments::None)
        });
    }
    false
}

/// Turns an `async fn` into a Strata tool. See the crate documentation and `docs/TOOLS.md`.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = match parse_tool_args(attr) {
        Ok(a) => a,
        Err(e) => return e.to_compile_error().into(),
    };
    let func = parse_macro_input!(item as ItemFn);
    match expand(args, func) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(args: ToolArgs, mut func: ItemFn) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "#[tool] needs an `async fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "#[tool] functions cannot be generic",
        ));
    }
    if matches!(sig.output, ReturnType::Default) {
        return Err(syn::Error::new(
            sig.span(),
            "#[tool] functions return `Result<T, E>` with `T: Serialize` and `E: Into<ToolError>`",
        ));
    }
    let fn_name = sig.ident.clone();
    let tool_name = args
        .name
        .as_ref()
        .map(LitStr::value)
        .unwrap_or_else(|| fn_name.to_string());
    if tool_name.is_empty()
        || !tool_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(syn::Error::new(
            args.name.as_ref().map_or(fn_name.span(), LitStr::span),
            "tool names use ASCII letters, digits, `_` and `-` only (LLM vendors reject others)",
        ));
    }
    let Some(description) = doc_text(&func.attrs) else {
        return Err(syn::Error::new(
            fn_name.span(),
            "a #[tool] needs a `///` doc comment: it becomes the description the model reads",
        ));
    };

    // Walk the parameters: an optional leading `&ToolContext`, then the typed arguments.
    let mut has_ctx = false;
    let mut fields = Vec::new();
    let mut call_args = Vec::new();
    for (i, input) in func.sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(pt) = input else {
            return Err(syn::Error::new(
                input.span(),
                "#[tool] functions cannot take `self`",
            ));
        };
        if is_context(&pt.ty) {
            if i != 0 {
                return Err(syn::Error::new(
                    pt.ty.span(),
                    "`&ToolContext` must be the first parameter",
                ));
            }
            has_ctx = true;
            pt.attrs.retain(|a| !a.path().is_ident("doc"));
            continue;
        }
        let Pat::Ident(pi) = pt.pat.as_ref() else {
            return Err(syn::Error::new(
                pt.pat.span(),
                "tool parameters must be plain names: each becomes a JSON property",
            ));
        };
        if let Type::Reference(r) = pt.ty.as_ref() {
            return Err(syn::Error::new(
                r.span(),
                "tool parameters are owned values deserialised from JSON: use `String`, not `&str`",
            ));
        }
        let ident = pi.ident.clone();
        let ty = pt.ty.as_ref().clone();
        let docs: Vec<Attribute> = pt
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .cloned()
            .collect();
        pt.attrs.retain(|a| !a.path().is_ident("doc"));
        fields.push(quote_spanned! {ty.span()=> #(#docs)* #ident: #ty });
        call_args.push(quote! { __args.#ident });
    }

    let capabilities = args.capabilities.iter().map(|(w, span)| {
        let v = CAPABILITIES
            .iter()
            .find(|(n, _)| n == w)
            .map(|(_, v)| *v)
            .unwrap_or("Read");
        let v = format_ident!("{}", v, span = *span);
        quote! { ::strata_engine::Capability::#v }
    });
    let side_effects = {
        let (w, span) = args
            .side_effects
            .clone()
            .unwrap_or_else(|| ("none".to_owned(), Span::call_site()));
        let v = SIDE_EFFECTS
            .iter()
            .find(|(n, _)| *n == w)
            .map(|(_, v)| *v)
            .unwrap_or("None");
        let v = format_ident!("{}", v, span = span);
        quote! { ::strata_engine::SideEffects::#v }
    };
    let hitl = args.hitl;
    let web_facing = args.web_facing;
    let idempotent = args.idempotent;
    let timeout = match args.timeout_secs {
        Some(s) => quote! { ::core::option::Option::Some(::core::time::Duration::from_secs(#s)) },
        None => quote! { ::core::option::Option::None },
    };
    let ctx_arg = if has_ctx {
        quote! { __ctx, }
    } else {
        quote! {}
    };
    let vis = &func.vis;
    let impl_ident = format_ident!("__StrataTool_{}", fn_name);

    Ok(quote! {
        // A tool's parameters are its JSON arguments; long lists are normal here.
        #[allow(clippy::too_many_arguments)]
        #func

        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis struct #impl_ident;

        const _: () = {
            use ::strata_engine::__private::{serde, schemars};

            #[derive(serde::Deserialize, schemars::JsonSchema)]
            #[serde(crate = "::strata_engine::__private::serde", deny_unknown_fields)]
            #[schemars(crate = "::strata_engine::__private::schemars")]
            #[allow(non_camel_case_types)]
            struct __Args { #(#fields,)* }

            impl #impl_ident {
                fn __spec() -> &'static ::strata_engine::ToolSpec {
                    static SPEC: ::std::sync::OnceLock<::strata_engine::ToolSpec> =
                        ::std::sync::OnceLock::new();
                    SPEC.get_or_init(|| ::strata_engine::ToolSpec {
                        name: ::std::string::String::from(#tool_name),
                        description: ::std::string::String::from(#description),
                        input_schema: ::strata_engine::__private::input_schema::<__Args>(),
                        capabilities: ::std::vec![#(#capabilities),*],
                        side_effects: #side_effects,
                        hitl: #hitl,
                        web_facing: #web_facing,
                        idempotent: #idempotent,
                        trusted_fields: ::std::vec::Vec::new(),
                        timeout: #timeout,
                    })
                }
            }

            #[::strata_engine::__private::async_trait]
            impl ::strata_engine::Tool for #impl_ident {
                fn spec(&self) -> &::strata_engine::ToolSpec {
                    Self::__spec()
                }

                fn validate(
                    &self,
                    __raw: &::strata_engine::__private::serde_json::Value,
                ) -> ::core::result::Result<(), ::strata_engine::ToolError> {
                    ::strata_engine::__private::check_args::<__Args>(__raw)
                }

                async fn call(
                    &self,
                    __ctx: &::strata_engine::ToolContext,
                    __raw: ::strata_engine::__private::serde_json::Value,
                ) -> ::core::result::Result<::strata_engine::ToolOutput, ::strata_engine::ToolError> {
                    let __args: __Args = ::strata_engine::__private::parse_args(__raw)?;
                    let __out = #fn_name(#ctx_arg #(#call_args),*)
                        .await
                        .map_err(::core::convert::Into::<::strata_engine::ToolError>::into)?;
                    ::strata_engine::__private::to_output(__out)
                }
            }

            ::strata_engine::__private::inventory::submit! {
                ::strata_engine::ToolRegistration {
                    crate_name: ::core::env!("CARGO_PKG_NAME"),
                    name: #tool_name,
                    make: || ::std::boxed::Box::new(#impl_ident),
                    file: ::core::file!(),
                }
            }
        };
    })
}
