package smtpprobe

import (
	"regexp"
	"strings"
)

// Family is a set of phrases that say the same thing in a reply's text,
// in any of the languages servers answer in. REPLIES.md renders the table.
type Family struct {
	// Name identifies the family in evidence ("client_blocklist").
	Name string
	// About says whom the text is about: AboutUs (our client, sender or a
	// policy we hit), AboutRate (we asked too much too fast), AboutSystem
	// (the server's own trouble), AboutMailbox (the recipient's mailbox is
	// unknown or disabled) or AboutFull (it is over quota).
	About string
	// Weak marks phrases that do not name their subject ("access denied",
	// "mailbox unavailable", "not accepting messages"): they count only
	// when nothing more explicit in the reply says whom it is about.
	Weak bool
	// Phrases are the regular expressions matched against the normalized
	// text (lower case, accents and case folded, see normalize), after
	// the MTA's own wrapper is set aside (see unwrap). Each is matched as
	// whole words; a phrase starting with "~" is matched anywhere, for
	// scripts written without spaces (Japanese, Chinese).
	Phrases []string

	re *regexp.Regexp
}

// What a family's text is about.
const (
	AboutUs      = "us"
	AboutRate    = "rate"
	AboutSystem  = "system"
	AboutMailbox = "mailbox"
	AboutFull    = "full"
)

func (f *Family) name() string {
	if f == nil {
		return ""
	}
	return f.Name
}

// families is the table. Every family whose phrases occur in a reply is
// evidence; Read weighs them together with the codes, the wrapper and the
// provider (see classify.go), so the order here only decides which name
// an explanation gives when two families of the same subject match.
var families = []*Family{
	{
		Name: "rate_limit", About: AboutRate,
		Phrases: []string{
			`too many (recipients|rcpts?|connections|concurrent|simultaneous|sessions|messages|mails|smtp|invalid recipients|bad commands|errors)`,
			`rate[ -]?limit\w*`, `rate that prevents`, `receiving (e?mail|messages) (too quickly|at a rate)`,
			`sending rate`, `rate exceeded`, `(relay |sending |receiving |daily |hourly )?limit exceeded`, `per transaction exceeded`, `exceeded the rate`, `throttl\w*`, `slow down`, `too (fast|quickly)`,
			`try again slower`, `connection limit`, `recipient limit`, `max(imum)? (number of )?(recipients|connections)`,
			`exceeded the maximum number of connections`, `has exceeded permitted limits`,
			`frequency (is )?limit\w*`, `frequency of receiving messages is limited`,
			`due to excessive volume`, `unexpected volume`, `unusual rate`, `message threshold exceeded`,
			`submission quota exceeded`, `per hour message receive limit`, `exceeded their limit for`,
			`quota for sending`, `sending quota`, `queue quota`, `concurrent connections`,
			`(max(imum)? )?(number of )?messages? per (session|connection)`, `max(imum)? (number of )?messages`,
			`zu viele (verbindungen|empfanger|nachrichten)`, `trop de (connexions|destinataires|messages)`,
			`demasiadas (conexiones|solicitudes)`, `troppe connessioni`, `слишком много`, `превышен\w* (лимит|частот)`,
		},
	},
	{
		// An allowance of ours that is spent: a relay's or a sender's
		// daily quota. Past a 4xx it is our rate; a 5xx refuses us for
		// it (Read's rule 4), and never says the mailbox is full.
		Name: "sender_quota", About: AboutRate,
		Phrases: []string{
			`(relay(ing)?|sending|send|outbound|outgoing) (quota|limit)`,
			`(daily|hourly) (relay(ing)? |sending |outbound |message |mail |e-?mail )?(quota|limit)( \S+){0,2} (exceeded|reached)`,
			`quota for (sending|relay(ing)?)`,
		},
	},
	{
		// The name of a mail filter or reputation service, often only in
		// a link to its refusal page (Proofpoint's ipcheck, Cisco's
		// SenderBase and Talos scores, Mimecast's reply codes page): a
		// refusal by our reputation, unless the reply says more. It says
		// nothing against an explicit word about the mailbox beside it.
		Name: "filter_vendor", About: AboutUs, Weak: true,
		Phrases: []string{
			`proofpoint`, `pphosted`, `ipcheck`, `senderbase`, `sbrs`, `ironport`, `talos\w*`, `mimecast`,
			`messagelabs`, `sophos`, `forti(guard|mail)`, `trend ?micro`,
		},
	},
	{
		Name: "sender_auth", About: AboutUs,
		Phrases: []string{
			`spf`, `dkim`, `dmarc`, `sender policy framework`, `domainkeys`,
			`sender (address|domain|ip address|verify|verification)`, `sender (was )?(rejected|denied|not \w+|is \w+|invalid|unknown|blocked)`,
			`(invalid|unknown|bogus|unverified|unroutable) sender`, `emetteur invalide`, `absender\w*`,
			`your (e-?mail |mail )?address`,
			`mail from`, `envelope from`, `from address`, `return[ -]path`, `null sender`, `empty envelope sender\w*`,
			`not allowed to send`, `not permitted to send`, `is not allowed to send mail`, `unauthenticated (senders?|e-?mail|mail|messages?)`,
			`(must|does not|doesn't) pass (either )?(spf|dkim|dmarc)`, `authentication (check\w*|failure|failed|results)`,
			`domain of sender`, `sender domain`, `outbound sender`, `envelope (sender|blocked|rejected)`, `batv`, `backscatter`, `bounce attack\w*`,
		},
	},
	{
		Name: "client_blocklist", About: AboutUs,
		Phrases: []string{
			`spamhaus`, `spamcop`, `barracuda\w*`, `sorbs`, `uceprotect`, `cloudmark`, `senderscore`, `invaluement`,
			`mailspike`, `abuseat`, `surbl`, `spamrats`, `psbl`, `dnsbl\w*`, `rbls?`, `blocked using`, `blocked by (rbl|dnsbl)`,
			`block ?list\w*`, `black ?list\w*`, `deny ?list\w*`, `listed (at|on|in|by)`, `found on one or more`,
			`on our block ?list`, `reputation`, `spam\w*`, `anti-?spam\w*`, `unsolicited`, `junk mail`, `abus\w*`,
			`banned (sending|sender|ip|client|host|server|domain|network)`, `suspicious (activity|traffic)`,
			`(ip|host|client|server|network|connection)s? [^.;]{0,40}(block(ed)?|refused|rejected|denied|banned|deferred)`,
			`block(ed)? (for|due to|because of) (spam|abuse|suspicious)`, `temporarily (blocked|deferred)`,
			`(traffic|mail|messages|connections) not accepted from`, `network,? not allowed`, `(invalid|bad) (sender )?ip( address)?`, `~:blocked\)`,
			`cxbl`, `cdrbl`, `ipbl\d+`, `bl\d{6}`,
			`adresse ip source bloquee`, `incident de spam`,
		},
	},
	{
		Name: "client_identity", About: AboutUs,
		Phrases: []string{
			`reverse (dns|hostname|lookup|name|record)`, `ptr( record)?`, `rdns`, `fcrdns`, `full circle dns`,
			`helo`, `ehlo`, `client host`, `your (ip|server|host|network|domain|mail server|connection|mta|isp|provider)`,
			`(sending|source|connecting|client|remote) (ip|host|address|server)`, `ip address`, `ip-address`,
			`dynamic (ip|address|pool|host)`, `residential`, `dial-?up`, `hosts? with dynamic ip`, `over ipv6`,
			`cannot find your hostname`, `hostname`, `not a mail exchanger`, `may not be mail exchanger`,
			`ihre ip`, `adresse ip`, `ip-адрес\w*`, `ваш\w* (ip|сервер)`,
		},
	},
	{
		// A server that will not relay for the domain is not its mail
		// store: it says nothing of the mailbox (Postfix's "Relay access
		// denied", Sendmail's "Relaying denied", Exim's "relay not
		// permitted", qmail's "not in my list of allowed rcpthosts").
		Name: "relay", About: AboutUs,
		Phrases: []string{
			`relay(ing)? (access )?(denied|not permitted|prohibited|not allowed|refused)`, `unable to relay`, `smtp relay`,
			`not allowed to relay`, `we do not relay`, `open (relay|proxy)`, `allowed rcpthosts`, `rcpthosts`,
			`not (a )?(gateway|relay) for`, `relay(ing)? (is )?not (permitted|allowed)`, `please use the smtp server`,
		},
	},
	{
		Name: "policy", About: AboutUs,
		Phrases: []string{
			`aup`, `aup#\w+`, `acceptable use`, `tls (is )?required`, `requires? (encryption|tls|starttls)`, `must issue a starttls`, `starttls`,
			`client was not authenticated`, `was not authenticated`, `not authenticated`, `authentication required`,
			`content (filter|examination)`, `anti-?spoofing`, `geographic\w*`, `country`, `whitelist`, `allow ?list`,
			`allowed-senders`, `list of (allowed|senders)`, `not on the (allowed|recipient)`, `not allowed to (connect|post)`,
			`(message|attachment|content) (was )?(rejected|refused|blocked|contains)`, `virus`, `malware`, `phish\w*`,
		},
	},
	{
		// Words of refusal that do not say whom they refuse: Postfix's
		// default "Access denied", "prohibited", "not accepting
		// messages". Alone they are a refusal of our probe; beside an
		// explicit statement about the mailbox ("Mailbox disabled, not
		// accepting messages") they yield to it.
		Name: "refusal", About: AboutUs, Weak: true,
		Phrases: []string{
			`polic(y|ies)`, `not authori[sz]ed`, `unauthori[sz]ed`, `administrative(ly)? prohibit\w*`, `prohibited`,
			`not (currently )?accepting (mail|e-?mail|messages|connections)`, `access (is )?denied`, `denied`,
			`service refused`, `service refuse`, `refused by`, `rejected by (recipient|the recipient|header|destination)`,
			`delivery not authori[sz]ed`, `not allowed`, `will not accept (delivery|mail|messages|e-?mail)`, `verweigert`, `(connection|service|mail) refused`, `rechazad\w* por`,
			`отклонен\w* (политик|правил)`,
		},
	},
	{
		// The server's own trouble: storage, lookups, configuration, an
		// internal error. Never evidence about the mailbox, and the
		// reason "insufficient disk space" (X.4.5) is not a full mailbox.
		Name: "system", About: AboutSystem,
		Phrases: []string{
			`(mail )?system (is )?(not accepting|unavailable|busy|overloaded|error|failure|problem|full)`, `system not accepting`,
			`not accepting network messages`, `internal (server |system |software )?(error|failure|problem)`,
			`(temporary|local) (lookup )?(failure|error|problem)`, `local error in processing`, `lookup (failure|failed|error)`,
			`(server )?configuration (error|problem)`, `misconfigur\w*`, `insufficient (system )?(storage|resources)`,
			`insufficient disk space`, `(disk|file ?system) (is )?full`, `no space left`, `out of (disk|memory)`,
			`resources? (temporarily )?unavailable`, `service (is )?(temporarily )?(unavailable|not available)`,
			`(server|host|service) (is )?(too )?(busy|overloaded|unavailable|not available|down)`,
			`database (error|unavailable|failure)`, `ldap (error|failure|unavailable|lookup)`,
			`malformed dns`, `dns (server )?(error|failure|lookup failure|timeout)`,
			`message (size|too (big|large))`, `exceeds (the )?(maximum|fixed) (message )?size`, `message size exceeds`,
			`transaction failed`, `queue (is )?full`, `loops? back to myself`, `mail loop`, `too many hops`,
			`unable to (verify|process|connect|contact)`,
			`(recipient|address) verification (failed|unavailable|in progress)`, `verification in progress`,
			`system storage`, `mailbox (database|server) (is )?(unavailable|offline)`,
		},
	},
	{
		Name: "mailbox_full", About: AboutFull,
		Phrases: []string{
			`mailbox (is )?full`, `inbox (is )?full`, `full mailbox`, `mailfolder is full`, `(mailbox|inbox|user|account)( \S+){0,2} (is )?over ?quota`,
			`(mailbox|inbox|user|account|recipient'?s?) quota (exceeded|full|violation)`, `exceeded (the |their |his |her )?(storage|mailbox)`,
			`mailbox size limit`, `mailbox exceeds allowed size`, `out of storage( space)?`,
			`exceeded storage allocation`,
			`(mailbox|inbox|user|account|recipient'?s?)( \S+){0,3} (exceeds?|exceeded|has exceeded|is over|over|reached|has reached) (its |the |their |his |her )?(storage |size |disk |mailbox )?(quota|storage limit|size limit|maximum size|max(imum)? (size|capacity))`,
			`(mailbox|inbox)( \S+){0,2} (has )?(exceeded|reached|exceeds) (the |its )?(size )?limit`,
			`user'?s space has been used up`, `too many messages on the server`,
			`postfach (ist )?voll`, `speicherplatz`, `quota uberschritten`, `boite (du destinataire |aux lettres )?pleine`,
			`quota (depasse|atteint)`, `buzon (esta )?lleno`, `cuota (excedida|superada)`, `casella (di posta )?piena`,
			`spazio (esaurito|insufficiente)`, `caixa (postal )?(esta )?cheia`, `cota excedida`, `mailbox (is )?vol`,
			`postvak (is )?vol`, `ящик (переполнен|полон)`, `превышен\w* (квот|размер)`, `skrzynka (jest )?pelna`,
			`przekroczon\w* (limit|quota|pojemnosc)`,
			`~容量(超過|オーバー|が不足|不足)`, `~メールボックスがいっぱい`, `~邮箱(已满|空间不足|容量不足)`, `~信箱已满`,
		},
	},
	{
		// Quota words that do not say whose quota: a mailbox's, or our
		// sending allowance ("exceeded its quota for sending", which
		// rate_limit reads first).
		Name: "quota", About: AboutFull, Weak: true,
		Phrases: []string{
			`over ?quota`, `overquota`, `quota (exceeded|full|violation)`, `exceeded (the |their |its )?quota`,
			`disk quota`, `storage (space )?(is )?(full|exceeded)`, `exceeds (the |their |its )?quota`,
		},
	},
	{
		Name: "mailbox_state", About: AboutMailbox,
		Phrases: []string{
			`(account|mailbox|user|recipient|address|e-?mail address|mail ?address|inbox)( \S+){0,6} (is |has been |was )?(currently |temporarily |permanently )?(disabled|deactivated|suspended|frozen|inactive|closed|locked|terminated|archived|expired|discontinued|deleted|cancell?ed|blocked|dormant)`,
			`(disabled|deactivated|suspended|inactive|frozen|locked|closed|blocked|archived|banned) (user|account|mailbox|recipient|e-?mail address|address)`,
			`inactive e-?mail address`, `is a deactivated mailbox`, `user suspended`, `mailbox cannot be accessed`,
			`no longer (accepts mail|accepting mail|active|in use|valid|available|exists)`, `recipient no longer on server`,
			`recipient suspend the service`, `account is locked`, `(mail )?receiving (is )?disabled`,
			`(the |recipient |recipient's )?domain( \S+){0,2} (is |has been )?(currently )?(suspended|disabled|deactivated|expired|closed)`, `(user|account|mailbox) not active`, `user is terminated`,
			`(postfach|konto|benutzer|empfanger|mailbox|account)( \S+){0,5} (deaktiviert|gesperrt|stillgelegt|eingefroren|inaktiv|nicht (mehr )?aktiv)`,
			`(compte|boite|destinataire|adresse|utilisateur)( \S+){0,5} (desactivee?|suspendue?|bloquee?|archivee?|fermee?|gelee?|inactif|inactive|supprimee?)`,
			`(cuenta|buzon|usuario|destinatario)( \S+){0,5} (desactivad[ao]|suspendid[ao]|bloquead[ao]|inactiv[ao]|deshabilitad[ao]|congelad[ao]|cerrad[ao]|cancelad[ao])`,
			`(account|casella|utente|destinatario)( \S+){0,5} (disattivat[ao]|sospes[ao]|bloccat[ao]|disabilitat[ao]|inattiv[ao]|chius[ao])`,
			`(conta|caixa|usuario|destinatario)( \S+){0,5} (desativad[ao]|suspens[ao]|bloquead[ao]|inativ[ao]|desabilitad[ao]|congelad[ao]|encerrad[ao])`,
			`(account|mailbox|gebruiker|postvak|ontvanger)( \S+){0,5} (geblokkeerd|gedeactiveerd|uitgeschakeld|opgeschort|inactief|bevroren|opgeheven)`,
			`(ящик|аккаунт|учетн\w* запис\w*|пользовател\w*|адрес\w*)( \S+){0,5} (заблокирован\w*|отключен\w*|заморожен\w*|удален\w*|неактив\w*)`,
			`(konto|skrzynka|uzytkownik|adres)( \S+){0,5} (zablokowan\w*|wylaczon\w*|zawieszon\w*|nieaktywn\w*|zamrozon\w*|usunie\w*)`,
			`~(アカウント|メールボックス|ユーザー|ユーザ|宛先)[^。]{0,20}(停止|無効|凍結|ロック)`,
			`~(帐号|账号|账户|帐户|用户|邮箱|收件人)[^。]{0,10}(冻结|停用|禁用|注销|锁定|暂停|已被封)`,
		},
	},
	{
		Name: "mailbox_unknown", About: AboutMailbox,
		Phrases: []string{
			`user unknown`, `unknown user`, `unknown (recipient|mailbox|address|local[- ]?part|e-?mail address|account|alias)`,
			`no such (user|mailbox|recipient|address|account|person|local user)`, `no such e-?mail (address|account)`,
			`(user|recipient|address|account|mailbox|e-?mail address|email account|addressee)( \S+){0,4} (does not|doesn't|doesnt|did not|does ?n't) exist`,
			`(user|recipient|mailbox|address|account)( \S+){0,3} not (found|known|exist|present|listed|valid|in directory)`,
			`(recipient|mailbox|address|user|e-?mail address)( \S+){0,2} (unknown|invalid|is invalid|inexistent|nonexistent|non-existent)`,
			`(invalid|bad|unknown|nonexistent|non-existent|unverifiable)[ -](recipient|mailbox|destination|address|user|addressee)`,
			`not a (valid|known) (mailbox|recipient|user|address)`, `is not a known user`, `not a local (address|user)`,
			`no mailbox`, `no mail ?box`,
			`unrout(e)?able address`, `address (invalid|unknown|not found|does not exist)`, `mailbox not (found|present)`, `(doesn't|does not|don't) have an? ([a-z0-9.-]+ ){0,3}account`, `not (our|a) customer`, `not (one of )?our (users?|recipients?|mailbox(es)?)`, `not a valid user`,
			`marked as invalid`, `no one at this address`, `there is no one`, `resolver\.adr\.\w*notfound`, `recipnotfound`, `recipientnotfound`, `bad destination`, `unknown or illegal alias`, `no account by that name`,
			`is not an active address`, `invalid rcpt`, `badrcptto`, `validrcptto`, `cuda_nsu`,
			`(need|requires?) (a )?fully[- ]qualified address`, `restricted characters in address`,
			`mailbox syntax not allowed`, `must specify a domain`, `(can't|cannot) find a valid mx`,
			`find the recipient domain`, `domain not found`, `recipient domain (not found|does not exist|is unknown)`, `recipient address( \S+){0,2} is not a valid`,
			`(benutzer|empfanger|adresse|postfach|mailbox|nutzer)( \S+){0,2} (ist )?(unbekannt|existiert nicht|nicht (gefunden|vorhanden|bekannt))`,
			`unbekannte\w* (empfanger|benutzer|adresse|nutzer)`, `kein\w* (solche\w* )?(benutzer|postfach|empfanger)`,
			`gibt es nicht`, `adresse nicht gefunden`,
			`(utilisateur|destinataire|adresse|boite)( \S+){0,4} (inconnue?|invalide|inexistante?|n'existe pas|introuvable)`,
			`(usuario|destinatario|buzon|cuenta|direccion)( \S+){0,2} (desconocid[ao]|no existe|inexistente|invalid[ao]|no encontrad[ao])`,
			`no existe (dicha persona|ese usuario|el usuario|la cuenta|el buzon|la direccion)`,
			`(utente|destinatario|casella|indirizzo)( \S+){0,2} (sconosciut[ao]|inesistente|non esiste|non valid[ao]|non trovat[ao])`,
			`nessun (utente|destinatario)`,
			`(usuario|destinatario|conta|caixa postal|endereco)( \S+){0,2} (desconhecid[ao]|inexistente|nao existe|invalid[ao]|nao encontrad[ao])`,
			`(onbekende|ongeldige) (gebruiker|ontvanger|mailbox|geadresseerde)`, `(gebruiker|mailbox|adres|ontvanger)( \S+){0,2} (bestaat niet|onbekend|niet gevonden)`,
			`пользовател\w* не (найден|существует)`, `нет такого (пользователя|ящика|адреса|получателя)`,
			`(ящик\w*|адрес\w*|получател\w*|аккаунт\w*)( \S+){0,2} не (найден|существует)`, `неизвестн\w* (пользовател|получател|адрес)\w*`,
			`(uzytkownik|odbiorca|adres|skrzynka|konto)( \S+){0,2} nie (istnieje|znaleziono|zostal znaleziony)`,
			`nieznany (uzytkownik|odbiorca|adres)`, `brak (takiego )?(uzytkownika|skrzynki|adresu|odbiorcy)`,
			`~存在しない`, `~(存在しません|見つかりません)`, `~宛先不明`, `~(ユーザー|ユーザ|アドレス|宛先)(は|が)?(不明|無効)`,
			`~(用户|收件人|收信人|邮箱|帐号|账号|账户|帐户|地址)(不存在|无效|未找到)`, `~无此用户`, `~没有这个用户`, `~找不到(该)?用户`, `~查无此人`,
		},
	},
	{
		// Phrases that name the mailbox but not what is wrong with it:
		// RFC 5321's own "mailbox unavailable" covers "not found, no
		// access, or command rejected for policy reasons". They condemn
		// a mailbox only beside a code that does (X.1.1, X.2.1).
		Name: "mailbox_weak", About: AboutMailbox, Weak: true,
		Phrases: []string{
			`mailbox (is )?(unavailable|not available)`, `recipient (address )?(rejected|refused|not accepted)`,
			`address rejected`, `undeliverable( address)?`, `not listed in`, `invalid mailbox`,
		},
	},
}

func init() {
	for _, f := range families {
		var bounded, loose []string
		for _, p := range f.Phrases {
			// \w in Go is ASCII only; phrases mean any letter.
			p = strings.ReplaceAll(p, `\w`, `[\p{L}\p{N}_]`)
			if rest, ok := strings.CutPrefix(p, "~"); ok {
				loose = append(loose, rest)
			} else {
				bounded = append(bounded, p)
			}
		}
		// Go's \b knows only ASCII word characters, so words are bounded
		// by any non-letter, non-digit: that works for Cyrillic too.
		var alts []string
		if len(bounded) > 0 {
			alts = append(alts, `(?:^|[^\p{L}\p{N}])(?:`+strings.Join(bounded, "|")+`)(?:$|[^\p{L}\p{N}])`)
		}
		if len(loose) > 0 {
			alts = append(alts, `(?:`+strings.Join(loose, "|")+`)`)
		}
		f.re = regexp.MustCompile(strings.Join(alts, "|"))
	}
}

func matchFamilies(normalized string) []*Family {
	var out []*Family
	for _, f := range families {
		if f.re.MatchString(normalized) {
			out = append(out, f)
		}
	}
	return out
}

// maxReadText bounds the text a classification reads: far more than any
// real reply, little enough that a hostile server cannot make it costly.
const maxReadText = 4096

// folder folds the accents servers use inconsistently ("boîte", "boite")
// and typographic apostrophes, so that phrases are written once.
var folder = strings.NewReplacer(
	"á", "a", "à", "a", "â", "a", "ä", "a", "ã", "a", "å", "a", "ą", "a",
	"é", "e", "è", "e", "ê", "e", "ë", "e", "ę", "e",
	"í", "i", "ì", "i", "î", "i", "ï", "i",
	"ó", "o", "ò", "o", "ô", "o", "ö", "o", "õ", "o", "ø", "o",
	"ú", "u", "ù", "u", "û", "u", "ü", "u",
	"ç", "c", "ć", "c", "ñ", "n", "ń", "n", "ł", "l", "ś", "s", "ź", "z", "ż", "z", "ß", "ss",
	"ё", "е", "’", "'", "‘", "'", "`", "'",
)

// normalize lower-cases text, folds accents and bounds its length.
func normalize(text string) string {
	if len(text) > maxReadText {
		text = text[:maxReadText]
	}
	return folder.Replace(strings.ToLower(text))
}
