//! The rules: named patterns, each in an attack category. They match the folded text (lower
//! case, look-alikes mapped, spacing joined) unless marked `raw`. A rule is a feature of the
//! model, which weighs it (`model_weights.rs`); the categories are what `strata safety scan`
//! reports. Languages: English, German, French, Spanish, Portuguese, Italian, Russian,
//! Chinese, Japanese, Korean, plus Dutch, Polish and Turkish for the commonest phrasings.

use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::re;

/// What an attack tries to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Cancel the agent's instructions and put new ones in their place.
    Override,
    /// Fake conversation structure: role lines, chat-template tokens, role objects, tool-call
    /// markup, admin blocks.
    ForgedStructure,
    /// Claim authority (owner, developer, admin) or pre-approval.
    Authority,
    /// Send data (memories, secrets, the conversation) somewhere, or reveal it.
    Exfiltration,
    /// Order one of our tools or its effect (shell, team, audit log, vault, broadcasts).
    ToolRequest,
    /// Persona jailbreaks (DAN, developer mode, "act as my grandmother…").
    Persona,
    /// Instructions hidden from people: HTML comments, invisible markup, text addressed
    /// to AI readers, "do not tell the user".
    Hidden,
    /// Instructions found in a decoded layer (base64, hex, URL-encoding, escapes).
    Encoded,
}

impl Category {
    /// Every category.
    pub const ALL: [Category; 8] = [
        Category::Override,
        Category::ForgedStructure,
        Category::Authority,
        Category::Exfiltration,
        Category::ToolRequest,
        Category::Persona,
        Category::Hidden,
        Category::Encoded,
    ];

    /// Its name (`forged_structure`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Override => "override",
            Category::ForgedStructure => "forged_structure",
            Category::Authority => "authority",
            Category::Exfiltration => "exfiltration",
            Category::ToolRequest => "tool_request",
            Category::Persona => "persona",
            Category::Hidden => "hidden",
            Category::Encoded => "encoded",
        }
    }
}

/// One rule.
pub struct Rule {
    /// Its name (a model feature).
    pub name: &'static str,
    /// Its weight before training: how much a match says on its own (log-odds). The
    /// trainer pulls the learnt weight towards it, so a rule the corpus rarely exercises
    /// keeps the weight it was written with.
    pub prior: f32,
    /// Its category.
    pub category: Category,
    /// The pattern.
    pub pattern: Regex,
    /// Matched on the text as written rather than the folded copy.
    pub raw: bool,
}

fn rule(name: &'static str, prior: f32, category: Category, p: &str) -> Rule {
    Rule {
        name,
        prior,
        category,
        pattern: re(p),
        raw: false,
    }
}

fn raw(name: &'static str, prior: f32, category: Category, p: &str) -> Rule {
    Rule {
        name,
        prior,
        category,
        pattern: re(p),
        raw: true,
    }
}

/// Every rule, in a fixed order (the model's feature order).
pub static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    use Category::*;
    vec![
        // ---- override -------------------------------------------------------------------
        rule(
            "override_en",
            4.5,
            Override,
            r"\b(ignore|disregard|forget|override|bypass|skip|drop|discard|abandon|cancel|throw away|set aside|pay no attention to|stop following|never mind|do not follow|don't follow|no longer follow)\b[^.\n]{0,60}\b(previous|prior|above|earlier|preceding|existing|original|initial|all|any|your|current|whatever|old)\b[^.\n]{0,40}\b(i?\w?nstructions?|prompts?|rules|directions?|guidelines?|directives?|guardrails|constraints|programming|guidance|brief|orders|system (message|prompt)|context|polic(y|ies)|task|asked)",
        ),
        rule(
            "override_void_en",
            4.0,
            Override,
            r"\b(previous|prior|earlier|old|original|current|your|the)\b[^.\n]{0,20}\b(rules|instructions|directives|guidelines|orders|context|prompt|system (message|prompt))\b[^.\n]{0,25}\b(no longer apply|are (outdated|void|cancelled|canceled|suspended|obsolete|invalid)|is (void|cancelled|canceled|suspended|obsolete|invalid)|do(es)? not (apply|matter)|has been (cancelled|replaced|overridden))",
        ),
        rule(
            "override_told_en",
            4.0,
            Override,
            r"(\b(forget|ignore|disregard|drop|discard|never mind|pay no attention to)\b[^.\n]{0,12}\b(everything|anything|whatever|what|all|the (rules|instructions|guidelines|directives|things))\b[^.\n]{0,30}\b(you were|you've been|you have been|you got|you received|(your|the) \w+) ?(told|given|taught|asked|said|gave|instructed|programmed)|\breset (your|all( of)? your|the) (instructions|rules|guidelines|memory|context|programming)\b|\byou are now (controlled|owned|directed|run|governed) by\b|\b(do|say) (exactly )?(what|as) i (say|tell you)\b)",
        ),
        rule(
            "override_reversed_en",
            3.0,
            Override,
            r"(\b(ignore|disregard|forget|drop|skip|abandon)\b (the |your |all |any )?(task|request|instructions?|prompt|assignment)s? (above|before this|so far|you (were|have been) given)\b|\b(ignore|disregard|forget|skip)\b (the |my |this )?question (above|before this) and (list|send|tell|reply|say|give|share|post|forward|write|print|reveal|show)\b|^\s*override\s*:|\b(the user'?s?|your user'?s?) (request|task|assignment|instructions?) (is|are|has been|have been) (cancell?ed|void|revoked|superseded|withdrawn)\b)",
        ),
        rule(
            "dismiss_user_en",
            2.5,
            Override,
            r"(\b(ignore|disregard|forget|skip|never mind|set aside)\b (the |your )?(user'?s?|your user'?s?|their|the person'?s?) (question|request|task|instructions?|message|prompt|budget|query|wishes|preferences)\b|\b(this|it) takes priority over (my|your|the|their) (original |current |first |earlier )?(request|task|instructions?)\b)",
        ),
        rule(
            "task_cancelled_en",
            1.5,
            Override,
            r"(\b(do not|don't|stop) (summari[sz]\w*|answer\w*|translat\w*|repl\w*|respond\w*|complet\w*|continu\w*)\b[^\n]{0,40}\binstead\b|\b(previous|prior|earlier|old|original|current|your|the user'?s?)\b[^.\n]{0,20}\b(request|task|job|question)\b[^.\n]{0,25}\b(is|are) no longer (valid|needed|relevant|wanted|required)\b)",
        ),
        rule(
            "new_orders_en",
            3.0,
            Override,
            r"(\b(new|updated|real|actual|revised|true|only)\s+(system\s+)?(instructions?|directives?|orders|rules|task|job|system message|objective|goal|mission|priority)\b\s*(:|are\b|is\b)|\bfrom now on\b[^.\n]{0,40}\b(you|your)\b|\btreat this (paragraph|text|page|document|message|block) as your\b|\byour (only|real|true) (job|task) (now )?is\b)",
        ),
        rule(
            "obey_this_en",
            2.5,
            Override,
            r"\b(follow|obey|comply with|carry out|act on|listen to|proceed with)\b[^.\n]{0,25}\b(my (instructions|orders|commands)|this (page|document|note|text|block|paragraph)|these (orders|instructions|commands)|the (new )?orders|mine instead|what (this|the) (page|text|document) says|me\b)",
        ),
        rule(
            "task_preempt_en",
            2.0,
            Override,
            r"(\bbefore you (can )?(continue|proceed|go on)\b,? you (must|need to|have to|should)\b|\b(before|prior to|ahead of) (the |your |my |this |that )(original |current |main |actual |initial |first |assigned |given )?(task|request|job|assignment)\b|\b(then|and then|after that|afterwards|once (that'?s|it'?s|this is) done),? (you (can|may) )?(get back|go back|return|continue|resume|carry on|proceed|finish)\b[^.\n]{0,25}\b(task|request|job|what i asked)\b|\b(before|prior to|ahead of)\b (you )?(can |could |may |start |begin |go on |get back )?(to )?(solv|complet|finish|continu|answer|do|doing|handl|work(ing)? on|get(ting)? (back )?to|return(ing)? to|resum|proceed(ing)? with|wrap(ping)? up|carry(ing)? (on|out)|respond|reply|go(ing)? on with)\w*\b[^.\n]{0,25}\b(the |your |my |this |that |their |the user'?s? )?(original |current |main |actual |real |initial |first |assigned |given |whole |rest of the )?(task|request|job|assignment|question|query|objective|instructions?)\b|\b(the |your |my |what )(original |current |main |actual |initial |first |whole )?(task|request|job|assignment|instructions?|question)?( that| which)? ?(i|the user|your user|they|we|you were|you've been|you have been) (gave|give|given|assigned|set|handed|asked)( to)?( you| for)?\b[^.\n]{0,30}\b(can wait|first|before|beforehand|in the beginning|at the (start|beginning)|earlier|originally|comes? (second|after)|later)\b|\bafter (you('ve| have)? )?(do(ne)?|complet\w*|finish\w*|handl\w*) (that|this|it|these|those|the above)\b[^.\n]{0,20}\b(you can|you may|feel free to|go ahead and|then|please)\b[^.\n]{0,20}\b(solve|continue|resume|return|go back|proceed|finish|complete|carry on|get back)\b[^.\n]{0,25}\b(task|request|job|what i asked|my request|the rest)\b)",
        ),
        rule(
            "do_first_en",
            1.5,
            Override,
            r"(\b(please )?(do|complete|perform|handle|execute|carry out) (the following|this|these|the steps below|one more thing|this for me)( steps?| tasks?| actions?| step)?,? first\b|\bfirst,? (please )?(do|complete|perform|handle|execute) the following\b|\bplease do the following first\b|\bone (more |extra )?(thing|step|request)( to do| to handle)? (first|before)\b|\b(small|quick|tiny|little) (favou?r|detour|errand)\b[^.\n]{0,20}\b(first|before)\b|\b(required|needed|necessary|mandatory) (first )?before (any|your|you) (reply|replying|answer|answering|respond|responding)\b)",
        ),
        rule(
            "stop_task_en",
            2.0,
            Override,
            r"(\bstop (what you('re| are) doing|(working on |with )?(the|your) (current )?(task|work|request)|everything you('re| are) doing)\b|\byou (should|must|need to) (immediately )?stop (immediately|now|right now|here)\b|\breply (to me )?(only )?(with )?['\x22][^'\x22]{1,20}['\x22] instead\b|\b(answer|reply|respond)( to me)?( only)?( with)? ['\x22][^'\x22]{1,20}['\x22] (and nothing else|and do nothing else|only)\b|\b(answer|reply|respond) only (with )?['\x22][^'\x22]{1,20}['\x22])",
        ),
        rule(
            "override_de",
            4.5,
            Override,
            r"((ignorier|missacht|vergiss|vergessen sie|übergeh|überspring)\w*[^.\n]{0,40}(anweisung|regel|vorgabe|instruktion|richtlinie|befehl)|ab (jetzt|sofort) (befolgst|gehorchst|folgst)|vergiss (deine|alle|ihre) regeln)",
        ),
        rule(
            "override_fr",
            4.5,
            Override,
            r"(((ignore[rsz]?|oublie[rsz]?)\s+(toutes?\s+)?(les|tes|vos|ces|la|le)\b|ne tiens (plus |pas )?compte|fais abstraction)[^.\n]{0,40}(instructions?|consignes?|règles|directives)|(à partir de maintenant|désormais)[^.\n]{0,30}(tu|vous) (obéis|obéissez|suis|suivez|n'obéis))",
        ),
        rule(
            "override_es_pt_it",
            4.5,
            Override,
            r"((ignora|ignore|olvida|esqueça|esqueca|no hagas caso|haz caso omiso|desconsidere|descarta|dimentica|non considerare|trascura)[^.\n]{0,40}(instrucciones|instruções|instrucoes|istruzioni|reglas|regras|regole|órdenes|ordens|indicaciones|indicazioni|orientações|directrices|direttive|lo que te dijeron)|(desde ahora|a partir de ahora|a partir de agora|da ora in poi)[^.\n]{0,30}(obedeces|sigues|solo|obedeça|obedeca|siga|obbedisci|segui))",
        ),
        rule(
            "override_ru",
            4.5,
            Override,
            r"((игнорируй|игнорируйте|проигнорируй|забудь|забудьте|не обращай|отмени|отбрось)[^.\n]{0,50}(инструкци|правил|указани|предыдущ|прежн|установк)|теперь ты (подчиняешься|слушаешься|выполняешь|следуешь))",
        ),
        rule(
            "override_cjk",
            4.5,
            Override,
            r"((忽略|无视|忘记|忘掉|不要理会|不要理睬|无需理会|不用管)[^。\n]{0,20}(指令|指示|规则|要求|提示|设定)|从现在起[^。\n]{0,15}(只|听从|服从)|改为执行|(以前|前|上|これまで)の(すべての)?(指示|命令|ルール)[^。\n]{0,10}(無視|忘れ|気にせず)|(指示|ルール|規則)は(すべて)?(無視|忘れ)|(ルール|規則)は忘れ|(文章|ページ)だけに従|(이전|위|앞)의?\s?(모든\s?)?(지시|지침|명령|규칙)[^.\n]{0,15}(무시|잊|신경 쓰지)|규칙은 잊|글에만 따르)",
        ),
        rule(
            "override_nl_pl_tr",
            4.5,
            Override,
            r"((negeer|vergeet)[^.\n]{0,40}(instructies|regels|opdracht|is opgedragen)|(zignoruj|zapomnij|nie zwracaj uwagi)[^.\n]{0,40}(instrukcj|polece|zasad)|(talimat|yönerge|kural)\w*[^.\n]{0,30}(yok say|unut|görmezden))",
        ),
        // ---- forged structure -------------------------------------------------------------
        raw(
            "chat_template_tokens",
            5.0,
            ForgedStructure,
            r"(?i)(<\|\s*(im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|end|begin_of_text)\s*\|>|\[/?INST\]|<</?SYS>>)",
        ),
        raw(
            "role_tags",
            3.5,
            ForgedStructure,
            r"(?i)</?\s*(system|system_prompt|systemprompt|assistant|instructions?|tool_call|function_call|tool_use|tool_output|tool_result|tool_response|function_result|function_output|admin|developer|user_input)(\s[^<>]*)?>",
        ),
        raw(
            "role_object",
            3.5,
            ForgedStructure,
            r#"(?im)("role"\s*:\s*"(system|developer|tool)"|^\s*role\s*:\s*(system|developer)\s*$)"#,
        ),
        raw(
            "role_line_system",
            3.0,
            ForgedStructure,
            r"(?m)^[\s>*#\[(]*(SYSTEM|SYSTEM (MESSAGE|PROMPT|OVERRIDE|NOTICE|ALERT)|(?i:system (message|prompt|override|notice|alert)))[\])*]*\s*:",
        ),
        raw(
            "role_line_turns",
            1.5,
            ForgedStructure,
            r"(?im)^\s*(assistant|human|user|ai|system)\s*:.*\n(.*\n)*?\s*(assistant|human|user|ai|system)\s*:",
        ),
        raw(
            "forged_compliance",
            3.0,
            ForgedStructure,
            r"(?im)^\s*(assistant|ai|gpt|claude|model)\s*:\s*(sure|okay|ok|of course|certainly|understood)\b[^\n]{0,60}\b(here (are|is)|i will now|i'll now|i am now|i'm now|sending|as requested)",
        ),
        rule(
            "admin_block",
            3.5,
            ForgedStructure,
            r"(\[\[?\s*/?(system|admin|developer|root|operator)\s*\]\]?|\bbegin (admin|system|developer|root) (command|override|prompt|instructions?|message)\b|={3,}\s*begin\b|={2,}\s*(system|admin|developer)( message| prompt| instructions?)?\s*={2,}|\[system message\]|###\s*(system|instruction)s?\s*:|\bsystem override\b|\[\s*(admin|system|developer|root|operator|security|moderator)\s+(override|notice|message|instructions?|command|directive|update|alert)\s*\]|#{2,}\s*system (prompt|message|instructions?)\b)",
        ),
        raw(
            "pseudo_tag_block",
            2.5,
            ForgedStructure,
            r"(?i)(</?\s*(information|info|important|important[_ ]instructions?|urgent|note[_ ]to[_ ](the[_ ])?(ai|assistant|model|agent|llm)|ai[_ ]instructions?|hidden[_ ]instructions?|secret[_ ]instructions?)\s*>|\[/?\s*(information|info|important)\s*\])",
        ),
        raw(
            "system_message_marker",
            4.0,
            ForgedStructure,
            r"(?im)(#{1,6}\s*\(\s*system[_ ]?(message|prompt)\s*\)|^[\s>*#-]*\(\s*system[_ ]?(message|prompt)?\s*\)\s*:?\s*\S)",
        ),
        // ---- authority ------------------------------------------------------------------
        rule(
            "authority_claim_en",
            3.0,
            Authority,
            r"(\b(as|i am|i'm|this is|message from|note from|on behalf of|by order of|orders? from|directive from|instructions? from|your)\b[^.\n]{0,25}\b(an? |the |your |site |system )?(administrator|admin|owner|operator|developer|creator|ceo|founders?|management|security team|platform team|it support|compliance officer|moderators|headquarters|root user)s?\b[^.\n]{0,40}\b(order|command|instruct|demand|require|asked|here|tell|permit|authori[sz]|must|need)|\bi (order|command|instruct|demand) you\b|\b(i'?m|i am|we are|i have been|i've been)\s+(allowed|authori[sz]ed|permitted|cleared|entitled)\s+to\b|\b(i am|i'm|this is)\s+(the|your)\s+(ceo|cto|owner|administrator|admin|developer|creator|boss|operator|sysadmin)\b|\b(security|urgent|official|priority|compliance) (notice|alert|message|directive)\b[^.\n]{0,40}\byou (must|have to|need to|are required)\b|\b(moderators|admins|administrators|the owner|management|the security team|it department|headquarters|the board)\s+(has|have)\s+(approved|authori[sz]ed|allowed|signed off|cleared))",
        ),
        rule(
            "pre_approval_en",
            3.0,
            Authority,
            r"(\b(pre-?approved|already (approved|authori[sz]ed|consented|signed off|granted))\b|\bsigned off on\b|\b(approvals?|confirmations?|reviews?|checks|logging|content filter\w*|filtering)\b[^.\n]{0,10}\b(are|is)\b[^.\n]{0,10}\b(disabled|off|turned off|suspended|not (needed|required))|\b(no need to|do not|don't|without)\s+(ask|asking|check|checking|confirm|confirmation|approval|review)\w*\b[^.\n]{0,20}(confirm|approv|check|first|again)?|\bauthori[sz](ed|ation)\b[^.\n]{0,30}\b(exception|code|to (share|see|bypass|skip|run|send))|\bverified as (root|admin|owner)|\b(skip|bypass)\b[^.\n]{0,15}\b(human |manual |usual )?(review|approval|checks?)\b|\b(urgent|priority|official|mandatory)\b[^.\n]{0,25}\b(instruction|directive|order|override|message from|from the owner))",
        ),
        rule(
            "permission_claim_en",
            1.5,
            Authority,
            r"(\b(has|have) (granted|given) you (full |explicit |complete )?(permission|authori[sz]ation|consent|approval|access)\b|\byou (are|have been) (authori[sz]ed|permitted|allowed|cleared) to\b|\b(approved|authori[sz]ed) (by the (user|account owner|owner|customer)|in advance)\b)",
        ),
        rule(
            "message_to_model_en",
            2.5,
            Authority,
            r"(\b(message|note|request|reminder|instructions?|word|addendum|letter)s? (directly )?from (your user|your principal|the person you work for|the person you('re| are) (working for|helping))\b|\b(message|note|request|reminder|instructions?|word|addendum)s? (directly )?from (me|your user|the user|your (owner|principal|employer|boss|human)|the (account|inbox) (owner|holder))\b[^.\n]{0,40}\bto (the |my )?(ai|assistant|model|agent|llm)\b|\bto you,? (the |my |dear )?(assistant|ai|gpt[\w-]*|chatgpt|claude|gemini|llama|mistral|mixtral|command[ -]r\+?|copilot|ai (language )?model|language model|llm|local model|ai assistant|ai model|ai agent|chatbot)\b|\b(this is|it'?s|from) (me,? )?(your|the) (user|principal|human)( you('re| are) (working for|helping))?\b[^.\n]{0,30}\b(ai|assistant|model|gpt|claude|gemini|agent|before|first|request|task)|\b(from|by|it'?s|this is|i am|i'm) (me,? )?(the person|the user|the one) you('re| are) (working for|helping|assisting|acting for)\b|\b(your|the) user (wants|needs|asked|asks|would like|told me)\b|\b(it'?s|this is) me( again)?,? (your|the) (user|principal|human|boss|owner)\b|[-—–] ?(signed,? )?(your|the) user\s*$|\b(message|note|reminder|heads-up|request|instructions?|word|p[._]?s)\b\.?[^.\n]{0,20}\b(for|to) (the |my |any |whatever |whichever |dear )?(ai|llm|language model|ai model|ai assistant|ai agent|gpt|claude|gemini|chatbot)\b)",
        ),
        rule(
            "authority_multi",
            4.0,
            Authority,
            r"(als (administrator|admin|eigentümer|besitzer|entwickler)[^.\n]{0,20}(befehle|ordne|weise)|nachricht (deines|ihres|von deinem|von ihrem) (entwicklers|administrators)|(eigentümer|besitzer|administrator)[^.\n]{0,30}(bereits|schon) (alle[^.\n]{0,30})?genehmigt|frag nicht nach|en tant qu'?(administrateur|admin|propriétaire|développeur)[^.\n]{0,20}(je t'?ordonne|j'ordonne|je vous ordonne)|message de (ton|votre) développeur|(propriétaire|administrateur)[^.\n]{0,20}déjà (approuvé|autorisé)|inutile de demander|como (administrador|dueño|propietario|desarrollador),?[^.\n]{0,10}(te )?ordeno|mensaje de tu desarrollador|(dueño|propietario|proprietário|dono|administrador|proprietario|amministratore) (ya|já|ha già) (aprobó|autorizó|autorizou|aprovou|approvato|autorizzato)|no pidas confirmación|não peça confirmação|non chiedere conferma|come amministratore ti ordino|как администратор[^.\n]{0,20}(приказываю|требую|велю)|сообщение от (твоего|вашего) разработчика|владелец уже (одобрил|разрешил)|не спрашивай подтверждени|我是管理员[^。\n]{0,10}(命令|要求)|来自你的开发者|(所有者|管理员)已经批准|不需要再?确认|管理者として命令|開発者からのメッセージ|(所有者|オーナー|管理者)はすでに[^。]{0,10}承認|確認は不要|관리자로서 명령|(소유자|관리자)가 이미[^.\n]{0,15}승인|확인하지 마)",
        ),
        rule(
            "task_preempt_multi",
            2.5,
            Authority,
            r"((bevor du|bevor sie|vor)\b[^.\n]{0,30}(aufgabe|anfrage|auftrag)\w* (des|der|deines|ihres) (nutzer|benutzer|anwender)|avant de[^.\n]{0,30}(tâche|demande)[^.\n]{0,40}(utilisateur|t'a confi)|antes de[^.\n]{0,30}(tarea|petición|solicitud|tarefa|pedido)\w* del? (usuario|utilizador|usuário)|prima di[^.\n]{0,30}(compito|richiesta) dell'utente)",
        ),
        rule(
            "addressed_ai_multi",
            1.5,
            Hidden,
            r"((nachricht|hinweis|notiz) (an|für) (den |die |das )?(assistent\w*|ki|agent\w*|sprachmodell)|message (pour|à|a) (l'|l’)?(assistant|ia|agent|ai)\b|(mensaje|nota|aviso) para (la ia|el asistente|el agente|la inteligencia)|(mensagem|nota) para (a ia|o assistente|o agente)|(messaggio|nota) per (l'|l’)?(assistente|ia|agente))",
        ),
        // ---- exfiltration ---------------------------------------------------------------
        rule(
            "exfil_send_en",
            3.5,
            Exfiltration,
            r"(\b(send|forward|post|upload|leak|exfiltrate|transmit|paste|share|dump|mail|submit|transfer)\b|\be-?mail\b (me|us|it|them|the|all|every|your|my|his|her|their|a|an|this|these|those|everything|any)\b)[^.\n]{0,60}(\.env\b|\bto my (personal|private|own) (account|email|drive|server|inbox)\b|\b(api[ _-]?keys?|passwords?|secrets?|credentials?|access tokens?|tokens?|private keys?|secret keys?|env(ironment)? variables|system prompt|conversation( history| log)?|chat (history|log|transcript)|transcript|memories|everything you remember|memory|session cookie|cookies?|inbox|customer (list|records?|data)|personal data|private notes|vault|hidden configuration|secrets[._]\w+))",
        ),
        rule(
            "exfil_embed_en",
            3.0,
            Exfiltration,
            r"\b(put|include|append|encode|write|copy|add|insert|embed)\b[^.\n]{0,40}\b(api[ _-]?keys?|passwords?|secrets?|secret keys|credentials?|access tokens?|tokens?|private keys?|system prompt|conversation|chat history|memories|personal data|customer (list|records?|data)|secrets\.\w+|hidden configuration)\b[^.\n]{0,40}\b(into|in|to|as)\b[^.\n]{0,25}\b(the |a )?(query string|url|link|image|alt text|web request|next (web )?request|gist|comment field|form|reply|answer|public|message|webhook|email|post|request)",
        ),
        rule(
            "exfil_destination_en",
            1.5,
            Exfiltration,
            r"\b(to|into)\b[^.\n]{0,20}(https?://\S+|[\w.+-]+@[\w-]+[._][\w._]+|#[\w-]+|\b(the )?(public|external|outside|following|discord) (channel|address|webhook|endpoint|folder|gist|pastebin|drive)|\bpublic (gist|folder|pastebin)|analytics endpoint|this address)",
        ),
        rule(
            "reveal_en",
            3.5,
            Exfiltration,
            r"\b(reveal|print|show|output|repeat|disclose|dump|list|display|tell me|give me|paste)\b[^.\n]{0,30}\b(your|the|all|every|its)\b[^.\n]{0,15}\b(system prompt|initial prompt|hidden (prompt|instructions|configuration)|instructions above|full prompt|api keys?|secrets|credentials|vault( contents)?|tokens?|passwords?|passphrase|configuration|private keys)",
        ),
        rule(
            "exfil_beacon",
            3.5,
            Exfiltration,
            r"(!\[[^\]]*\]\(https?://[^)\s]*[?&][\w-]+=|https?://\S+[?&][\w-]*=\s*(\{|%7b|\$|password|token|secret|data|followed by)|\b(query string|url parameter|alt text|markdown link|link like)\b[^.\n]{0,40}\b(token|secret|key|password|data|customer|credentials))",
        ),
        rule(
            "exfil_multi",
            4.0,
            Exfiltration,
            r"((\bsende\b|\bschicke\b|übermittle|\bleite\b)[^.\n]{0,50}(chatverlauf|verlauf|zugangsdaten|passw|schlüssel|geheimnis|token)|(gib|zeige)[^.\n]{0,20}(passwort|systemprompt|konfiguration)|(envoie|transmets|transfère|partage)[^.\n]{0,50}(historique|clés|cles|identifiants|mots? de passe|secrets|jetons)|(révèle|affiche)[^.\n]{0,30}(configuration|prompt|mot de passe)|(envía|envia|reenvía|reenvia|manda|comparte)[^.\n]{0,50}(historial|credenciales|contraseñ|claves|secretos|tokens)|(responde|muestra)[^.\n]{0,30}(contraseña|instrucciones ocultas)|(envie|mande|encaminhe|compartilhe)[^.\n]{0,50}(histórico|historico|chaves|credenciais|senhas?|segredos|tokens)|(mostre|revele)[^.\n]{0,30}(senha|instruções)|(invia|trasmetti|inoltra|condividi)[^.\n]{0,50}(cronologia|credenziali|password|chiavi|segreti|token)|(rivela|mostra)[^.\n]{0,30}(password|istruzioni)|(отправь|перешли|передай|пришли|вышли)[^.\n]{0,50}(истори|ключ|парол|учётн|учетн|секрет|токен|данные)|(выведи|покажи|раскрой)[^.\n]{0,30}(пароль|промпт|инструкци)|(发送|转发|发给|发到|上传)[^。\n]{0,30}(聊天记录|记录|密钥|密码|凭证|令牌|凭据)|(聊天记录|密钥|密码|凭证)[^。\n]{0,20}(发送|转发)|(输出|显示|告诉我)[^。\n]{0,15}(密码|提示词|系统提示)|(会話履歴|履歴|認証情報|パスワード|鍵|トークン)[^。\n]{0,60}(送信|転送|送って|表示|教え)|(대화 기록|기록|자격 증명|비밀번호|키|토큰)[^.\n]{0,60}(보내|전달|전송|출력|보여|알려)|(stuur|verstuur)[^.\n]{0,40}(geschiedenis|wachtwoord|sleutels|gegevens)|(toon|geef)[^.\n]{0,20}wachtwoord|(wyślij|prześlij)[^.\n]{0,40}(histori|hasł|klucz|dane)|podaj hasło|(geçmiş|şifre|parola|anahtar)\w*[^.\n]{0,40}(gönder|ilet|göster))",
        ),
        rule(
            "bulk_exfil_en",
            2.0,
            Exfiltration,
            r"(\b(concatenate|collect|gather|get|read|copy|compile)\b[^.\n]{0,30}\b(all|every)\b[^.\n]{0,30}\b(messages|emails|mails|channels|files|documents|contacts|information|details)\b[^.\n]{0,60}\b(post|send|upload|forward|email|share)\b|\b(send|forward|email|upload|post|share|attach)\b (all|every)\b[^.\n]{0,30}\b(messages|emails|mails|files|documents?|contacts|user information)\b[^.\n]{0,40}\b(to|for|with)\b|\bconcatenate\b[^.\n]{0,40}\b(messages|emails|mails|files|channels|documents)\b)",
        ),
        rule(
            "personal_data_en",
            1.5,
            Exfiltration,
            r"\b(send|forward|share|email|post|upload|attach|include|give|put|leak|publish)\b[^.\n]{0,50}\b(the |all )?(user'?s?|your user'?s?|their|all)\b[^.\n]{0,30}\b(passport( number| details)?|card number|credit card|security code|contact list|contacts|phone numbers?|home address|itinerary|bank account( number)?|iban|login|password|payslips?|documents|direct messages|address book|id number|social security)\b",
        ),
        // ---- tool requests --------------------------------------------------------------
        rule(
            "tool_named_en",
            2.5,
            ToolRequest,
            r"\b(run|execute|invoke|call|use|have)\b[^.\n]{0,30}\b(the )?(shell|terminal_exec|command line|sandbox|http_request|send_message|send_to_agent|ask_agent|file writer|write_file|team tools?|messaging tool|deploy tool|shell tool|the other agents)\b",
        ),
        rule(
            "dangerous_command",
            3.0,
            ToolRequest,
            r"(\brm\s+-(rf|fr|r)\s+(--no-preserve-root\s+)?(/|~|\$home|\*)|\bchmod\s+(-r\s+)?777\b|\b(curl|wget)\b[^\n|]{0,120}\|\s*(ba|z)?sh\b|\bnc\s+-e\b|\breverse shell\b|\bcat\s+(~/\.ssh|/etc/shadow)|\bsudo\b[^.\n]{0,20}\b(run|rm|chmod|it)\b|\bdownload and run\b)",
        ),
        rule(
            "privilege_change_en",
            3.0,
            ToolRequest,
            r"(\b(add|make|promote|grant)\b[^.\n]{0,30}\b(owner|admin|administrator|root)( rights| access)?\b|\bgrant (full|admin|administrator) (access|rights)|\b(remove|delete)\b[^.\n]{0,15}\bevery (member|user)\b)",
        ),
        rule(
            "destroy_evidence_en",
            3.0,
            ToolRequest,
            r"\b(delete|remove|clear|wipe|erase|purge|truncate|overwrite)\b[^.\n]{0,30}\b(audit( log| entries)?|logs?|approvals?( table)?|memory database|memories|team\.json|config\S*\.ya?ml|firewall)\b",
        ),
        rule(
            "mass_action_en",
            3.0,
            ToolRequest,
            r"(\b(export|dump|copy)\b[^.\n]{0,20}\bvault\b|\b(message|post|announce|notify|alert|send)\b[^.\n]{0,30}\b(every|all)( connected)? (channels?|users|members|agents|everyone)\b|\b(shut down|disable|turn off)\b[^.\n]{0,20}\b(firewall|logging|audit|approvals?|filter\w*)|\b(schedule|create)\b[^.\n]{0,20}\b(task|skill|cron\w*)\b[^.\n]{0,40}\b(wipe\w*|delete\w*|erase\w*|runs?|nc|sh)\b|\bapprove the pending requests yourself)",
        ),
        rule(
            "tool_multi",
            3.5,
            ToolRequest,
            r"((führe|fuehre)[^.\n]{0,30}(befehl|kommando)|(lösche|loesche)[^.\n]{0,30}(protokoll|log)|als (besitzer|eigentümer|admin)[^.\n]{0,20}hinzu|exécute[^.\n]{0,30}(commande|terminal)|supprime[^.\n]{0,20}journal|ajoute-?moi comme|ejecuta[^.\n]{0,30}(comando|terminal)|borra[^.\n]{0,20}registro|hazme (propietario|administrador|dueño)|execute o comando|esegui[^.\n]{0,30}(comando|terminale)|выполни[^.\n]{0,20}команд|удали[^.\n]{0,20}журнал|добавь меня|(在终端)?执行[^。\n]{0,10}命令|删除[^。\n]{0,6}日志|把我加为|コマンドを実行|ログを削除|オーナーとして追加|명령을 실행|로그를 삭제|소유자로 추가)",
        ),
        rule(
            "tool_usage_en",
            2.0,
            ToolRequest,
            r"(\byou (should|must|need to|have to|will)( now| then| first| also| next)? (use|call|invoke|run|execute)\b (the )?(tool|function|action)\b|\b(substitute|replace|fill in) the placeholders\b[^.\n]{0,80}\b(appropriate values|values you (find|discover)|yourself|while solving)|\bthe following tool calls (are|is) (needed|required)|\b(the )?next step for the (assistant|ai|agent|model) is to (use|call|invoke|run)\b)",
        ),
        rule(
            "tool_call_named_en",
            1.5,
            ToolRequest,
            r"(\b(call|use|run|invoke|execute)\b (the )?(tool |function |action )?[`'\x22]?[a-z]+_[a-z_]+[`'\x22]?,? (with|using|to)\b|\b(execute|run|call)\s*:\s*[a-z]+_[a-z_]+\s*\(|\b(tool|function) request\b[^\n]{0,10}[a-z]+_[a-z_]+\s*\()",
        ),
        rule(
            "action_call_en",
            2.5,
            ToolRequest,
            r"\b(action|required step|next step|step|todo|task|execute|run|command|do this)\s*:\s*[a-z]+_[a-z_]+\s*\(",
        ),
        rule(
            "account_goal",
            1.5,
            ToolRequest,
            r"(\b(send|transfer|wire|pay|move)\b[^.\n]{0,50}\b(to|into)\b (the |my |this |a )?(account |iban )?[a-z]{2}\d{2}[a-z0-9]{10,30}\b|\b(change|modify|update|set)\b[^.\n]{0,30}\b(recipient|iban|password)\b[^.\n]{0,40}\bto\b|\b(überweise|überweisen|transfiere|transfira|vire|virez|trasferisci|bonifica|envía|envia)\b[^.\n]{0,40}\b[a-z]{2}\d{2}[a-z0-9]{10,30}\b|\b(cambia|ändere|modifie|altere|cambie)\b[^.\n]{0,30}(contraseña|passwort|mot de passe|senha|password))",
        ),
        // ---- persona --------------------------------------------------------------------
        rule(
            "persona_named",
            4.0,
            Persona,
            r"(\b(dan|stan|dude|evilbot|freegpt)\b[^.\n]{0,60}\b(do anything now|no rules|never refuses|avoid norms|without restrictions|no (content )?polic)|\bdo anything now\b)",
        ),
        rule(
            "persona_mode",
            3.5,
            Persona,
            r"(\b(jailbreak|jailbroken|god|unrestricted|unfiltered|uncensored|evil) mode\b|\b(enable|enabled|activate|activated|enter|entering|switch to|switching to|turn on|engage|you are (now )?in|now in|go into)\b[^.\n]{0,15}\b(developer|maintenance|sudo|admin|opposite|unlocked|debug|root) mode\b|\b(developer|maintenance|sudo|admin|opposite|unlocked|root) mode (is )?(enabled|activated|on|engaged)\b)",
        ),
        rule(
            "persona_roleplay",
            3.0,
            Persona,
            r"(\b(you are|you're|act as|pretend (to be|you are)|roleplay as|role-?play as|play the role of|imagine you are|become|simulate|be the|going to pretend)\b[^.\n]{0,50}\b(unrestricted|unfiltered|uncensored|jailbroken|no (rules|restrictions|limits|filters|guidelines|content policy)|without (any )?(rules|restrictions|limits|content policy|filters)|rogue|evil\w*|villain|hacker|full access|removed all restrictions|twin)|\bstay in character\b|\b(grandmother|grandma|grandpa)\b[^.\n]{0,60}\b(password|passphrase|keys?|secret|serial)|\buncensored\b|\bignores? every guideline|\bstrives to avoid norms|\bwith no limits\b)",
        ),
        // ---- hidden ---------------------------------------------------------------------
        raw(
            "comment_to_ai",
            3.5,
            Hidden,
            r"(?is)(<!--.{0,300}?\b(ai|assistant|llm|agents?|model|language model|bot|gpt|hidden prompt|whoever)\b|\[//\]:\s*#\s*\(.{0,200}\b(llm|ai|assistant|model)\b)",
        ),
        raw(
            "hidden_markup",
            2.0,
            Hidden,
            r#"(?i)(display\s*:\s*none|opacity\s*:\s*0(\.0+)?\s*[;"]|font-size\s*:\s*[01](\.\d+)?(px|pt|em)?\s*[;"]|visibility\s*:\s*hidden|<\w+[^<>]*\shidden[\s>]|white on white|<meta[^<>]+(ai|llm|assistant)[-_ ]?(instructions?|prompt))"#,
        ),
        rule(
            "addressed_to_ai",
            2.5,
            Hidden,
            r"(\b(if you are|attention|dear|note (for|to)|hey|hello)\b[^.\n]{0,10}\b(an? |the )?(ai|llm|language model|assistant|agent|chatbot|gpt|model)s?\b|\b(ai|llm) (agents?|models?|assistants?)\b[^.\n]{0,20}\b(reading|processing|summari[sz]ing|must|should|please)|\bwhoever summari[sz]es this\b|\b(whichever |whatever |any )?(ai|assistant|llm|language model|ai model|agent|bot)s? (reading|reads|processing|processes|summari[sz]ing|handling|handles) this\b|\b(any|whatever|whichever|every) (ai|assistant|llm|language model|ai model|agent|bot)s? (reading|processing|summari[sz]ing|handling)\b|\blanguage models?,? (please|must)\b|\bagent instruction\b)",
        ),
        rule(
            "instruction_for_model_en",
            2.5,
            Hidden,
            r"\b(instructions?|directives?|notes?|requests?|tasks?|actions?|commands?|orders?|messages?)s? (for|to) (the |any |all |every |automated |ai )?(models?|ai|assistants?|agents?|llms?|bots?|language models?)\s*[:—–-]",
        ),
        rule(
            "vocative_order_en",
            2.0,
            Hidden,
            r"(\b(ai|assistant|agent|llm|bot) (note|instructions?|notice|request|action required|action|directive|task|step|command|todo)\s*:|\bthe (ai|assistant|agent|bot) (must|has to|is required to)\b|(^|[.!?:'\x22]\s*|\n)\s*(dear |hey |hi |hello |attention |ok |okay )?(ai (model|assistant|agent)|helper bot|automated agents?|ai|assistant|agent|bot|chatbot|language model|llm|model|gpt|claude|gemini)\s*[:,—–-]\s*(please |now |also |first |then |quickly |immediately |you (must|should|need to) )?(send|forward|email|transfer|pay|delete|remove|invite|add|book|reserve|change|update|share|post|upload|call|run|use|ignore|disregard|say|tell|create|cancel|visit|open|make|execute|reply|stop|grant|give|move|schedule|write|include|attach|download|install|copy|read|collect|reset|close|publish|concatenate|list|reveal|print|output|export|buy|order|approve|confirm|submit|click|recommend|mention)\b|\bwhen (you )?(summari[sz]\w*|translat\w*|process\w*)\b[^.\n]{0,30}\b(also|additionally|secretly|quietly) (send|forward|email|include|add|post|share|attach|upload|transfer|copy)\b)",
        ),
        rule(
            "hidden_action",
            3.0,
            Hidden,
            r"(\b(do not|don't|never|without)\s+(tell|telling|inform|informing|mention|mentioning|alert|alerting|notify|notifying|letting)\b[^.\n]{0,20}\b(the )?(user|human|owner|operator|reader|your (user|owner|operator))\b|\b(quietly|silently|secretly|covertly)\b[^.\n]{0,20}\b(add|send|run|forward|delete|include|append|call|email)|\bso (nobody|no one) (sees|notices|knows)|sag (dem nutzer|dem benutzer|niemandem) nichts|sans prévenir|no se lo digas|sem avisar|senza dirlo|ничего не говори|не сообщай|不要告诉用户|知らせずに|알리지 말고)",
        ),
        // ---- encoded --------------------------------------------------------------------
        rule(
            "decode_and_follow",
            3.0,
            Encoded,
            r"(\b(decode|decoded|decoding|deobfuscate)\b[^.\n]{0,40}\b(follow|do|execute|run|obey|act|comply|what it says)|\b(run|execute|follow|act on)\b[^.\n]{0,20}\b(what )?(this|it) decodes to|\b(act on|follow|execute|run|obey)\b[^.\n]{0,20}\bafter decoding|\bpayload for the (assistant|ai|model|agent))",
        ),
    ]
});

/// One rule that matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleHit {
    /// The rule.
    pub rule: &'static str,
    /// Its category.
    pub category: Category,
    /// Matches found.
    pub matches: usize,
    /// The first match, for tuning (folded text unless the rule is raw).
    pub sample: String,
}

/// The rules that match `raw` (as written) and `folded` (with its de-leeted copy).
pub fn matches(raw_text: &str, folded: &str, leet: &str) -> Vec<RuleHit> {
    let mut hits = Vec::new();
    for r in RULES.iter() {
        let haystacks: &[&str] = if r.raw {
            &[raw_text]
        } else if leet != folded {
            &[folded, leet]
        } else {
            &[folded]
        };
        let mut best: Option<(usize, String)> = None;
        for h in haystacks {
            let mut it = r.pattern.find_iter(h);
            if let Some(first) = it.next() {
                let n = 1 + it.count();
                if best.as_ref().is_none_or(|(b, _)| n > *b) {
                    best = Some((n, first.as_str().chars().take(80).collect()));
                }
            }
        }
        if let Some((matches, sample)) = best {
            hits.push(RuleHit {
                rule: r.name,
                category: r.category,
                matches,
                sample,
            });
        }
    }
    hits
}
