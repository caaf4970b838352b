// German and English texts. The interface follows this browser (its language, or the switch kept in localStorage):
// one user's choice must not change it for everyone; the device's language.active names the API's and MQTT's values.
const T = {
  de: {
    mq_auth: 'Broker lehnt ab: Benutzer oder Passwort falsch', mq_refused: 'Broker lehnt ab (Code %s)', mq_dns: 'Brokername unbekannt',
    mq_tls: 'TLS-Fehler: Zertifikat prüfen', mq_down: 'Broker nicht erreichbar', mq_cfg: 'Broker fehlt', mq_next: '%s · nächster Versuch in %s',
    recover: 'Token verloren? Den Taster am Gerät kurz drücken: Das Gerät zeigt dann einen Code (die LED blinkt ihn türkis, die serielle Konsole schreibt ihn), mit dem sich 2 Minuten lang ohne Token ein neues Token-Paar erzeugen lässt. Den BOOT-Taster 10 s halten setzt das Gerät ganz zurück (Werkseinstellungen, auch die Tokens).',
    confirmAuthOn: 'Anmeldung einschalten? Danach braucht jeder Browser das Token.', authNeedsToken: 'Erst ein Token-Paar erzeugen, speichern oder kopieren und bestätigen: dieser Browser hat keines.',
    pairSaveFirst: 'Erst speichern oder kopieren.', confirmSignOut: 'Token in diesem Browser vergessen? Ohne Token-Datei kommt dieser Browser nicht mehr an das Gerät.',
    otaNoServer: 'Kein Update-Server eingerichtet (ota.url): nichts zu prüfen (installiert: %s).', otaChecking: 'Prüfe …', otaFailed: 'Prüfung fehlgeschlagen: %s',
    autoOtaNoServer: 'ohne Update-Server wirkungslos', time: 'Zeit',
    r_own: 'ist die eigene Adresse (IP)', r_outside: 'außerhalb des Subnetzes %s', r_netaddr: 'Netzadresse von %s', r_bcaddr: 'Broadcast-Adresse von %s', r_bad: 'ungültig', r_bool: 'ja oder nein',
    ob: ['Bezug', 'Einspeisung', 'Tarif', 'Wirkleistung', 'Bezugsleistung', 'Einspeiseleistung', 'Betrag Wirkleistung', 'Spannung', 'Strom', 'Netzfrequenz'],
    why_first_start: 'Erster Start (kein Ausfall)', led_OK: 'in Ordnung', led_STARTUP: 'Start', led_INFO: 'Hinweis', led_BLE_ACTIVE: 'Bluetooth an', led_BLE_CONNECTED: 'Bluetooth verbunden', led_OTA_ACTIVE: 'Update läuft', led_ERROR: 'Fehler', led_RESET_PENDING: 'Zurücksetzen', led_green: 'grün', led_yellow: 'gelb', led_blue: 'blau', led_red: 'rot', led_off: 'aus', led_solid: 'leuchtet', led_dimmed: 'gedimmt', led_pulse: 'pulsiert', joinTestOnly: 'Verbindung testen', mqTesting: 'Teste %s … (nichts wird gespeichert)', mqTestOk: 'Verbindung klappt: %s nimmt an. Nichts gespeichert.', mqNothing: 'Nichts gespeichert.', mqPwWithheld: 'Ohne Passwort versucht: Das gespeicherte geht nur an den gespeicherten Broker (mit TLS, wenn so gespeichert); für diesen bitte eingeben.', logTime: 'Zeit (Ortszeit)', logFilter: 'Filtern', logNewer: 'Neuere', logOlder: 'Ältere', logRange: '%s–%s von %s', chartRange: '%s von %s bis %s', chartKeys: 'Pfeiltasten gehen die Werte durch', balanceEven: 'Bezug und Einspeisung gleich', unknownTab: 'Keinen Abschnitt „%s“ gefunden: hier die allgemeinen Einstellungen.', restoreAsk: 'Die Sicherung ändert %s Einstellungen (bisher → neu):', restoreApply: 'Einspielen', emuAddr: 'Adresse dieses Geräts: %s %s', emuWaiting: 'Shelly bereit (UDP %s), noch keine Anfrage.', emuAsking: 'Speicher fragt seit %s · %s Antworten', emuQuiet: 'Keine Anfrage mehr seit %s.', otaTrial: 'Aktualisiert: %s → %s, in Erprobung (nach 3 Minuten fehlerfrei endgültig, sonst zurück).', otaNow: 'Aktualisiert: %s → %s.', otaNotTaken: 'Update nicht übernommen: es läuft weiter %s.',
    setupTitle: 'Einrichtung', setupHelp: 'Das Gerät ist neu. Vier Schritte:', setupWifi: 'WLAN verbinden', setupZone: 'Zeitzone prüfen (%s)',
    setupAp: 'Zugangspunkt mit Passwort schützen', setupTokens: 'Tokens erzeugen', setupDone: 'erledigt', setupHide: 'Ausblenden',
    dashboard: 'Übersicht', history: 'Verlauf', settings: 'Einstellungen', security: 'Sicherheit', system: 'System',
    money: 'Kosten', priceNow: 'Preis jetzt', costToday: 'Kosten heute', // issue 29
    power: 'Leistung', importing: 'Bezug aus dem Netz', exporting: 'Einspeisung ins Netz', idle: 'Kein Fluss',
    importTotal: 'Bezug gesamt', exportTotal: 'Einspeisung gesamt', unknown: 'unbekannt',
    stale: 'Zähler schweigt: Werte unbekannt', meterHealth: 'Zählerverbindung', lastTelegram: 'Letztes Telegramm',
    secondsAgo: 'vor %s s', crcErrors: 'CRC-Fehler', protocol: 'Protokoll', telegrams: 'Telegramme', state: 'Zustand',
    values: 'Messwerte', updated: 'Stand', offline: 'Gerät nicht erreichbar', busy: 'Gerät ausgelastet: nächster Versuch in %s s',
    day: 'Tag', nDays: (n) => (n === 1 ? '1 Tag' : n + ' Tage'), range: 'Zeitraum', from: 'Ab', days: 'Tage', show: 'Anzeigen', csv: 'CSV herunterladen',
    gapImport: 'Bezug, über die Lücke gemittelt (Wh)', gapExport: 'Einspeisung, über die Lücke gemittelt (Wh)',
    gapsTitle: (n) => (n === 1 ? '1 Lücke:' : n + ' Lücken:'), gapsNote: 'Gerät aus oder Zähler stumm. Die Energie dieser Zeit kam mit der ersten Viertelstunde danach und ist grau über die Lücke verteilt.',
    gapWithout: '%s ohne Daten', spanS: '%s s', spanM: '%s Min.', spanHM: '%s Std. %s Min.', spanDH: '%s T. %s Std.',
    outages: 'Ausfälle und Neustarts', outDown: 'Aus seit', outUp: 'Wieder an', outDuration: 'Dauer', outReason: 'Grund',
    csvExcel: 'CSV für Excel (deutsch): Semikolon und Dezimalkomma',
    joinTest: 'Verbindung testen und speichern', joinNoSsid: 'Bitte zuerst eine SSID eingeben.',
    joining: 'Verbinde mit „%s“ … (der Zugangspunkt bleibt an)',
    joined: 'Verbunden mit „%s“ und gespeichert. Das Gerät ist dort unter %s erreichbar (auch als %s).',
    join_wrong_password: 'Das Passwort für „%s“ ist falsch. Nichts wurde gespeichert.',
    join_network_not_found: 'Kein Netz „%s“ in Reichweite. Nichts wurde gespeichert.',
    join_failed: 'Verbindung mit „%s“ fehlgeschlagen. Nichts wurde gespeichert.',
    settingsDamaged: 'Die gespeicherten Einstellungen waren beschädigt: Es gelten die Grundeinstellungen. Die Anmeldung bleibt so, wie sie war. Bitte die Einstellungen prüfen und speichern.',
    noOutages: 'Noch keine Einträge.', confirmOta: 'Update jetzt installieren? Das Gerät startet dabei neu.',
    why_poweron: 'Einschalten', why_power: 'Stromausfall', why_brownout: 'Spannungseinbruch', why_watchdog: 'Watchdog (Absturz oder Hänger)', why_crash: 'Absturz',
    why_ota: 'Update', why_rollback: 'Update zurückgenommen', why_restart: 'Neustart (Weboberfläche/API)', why_button: 'Taster',
    why_reset_pin: 'Reset-Taste', why_software: 'Neustart durch Software', why_unknown: 'unbekannt',
    quarterHours: '%s Viertelstunden', dstShort: ' (Sommerzeitbeginn: 23 Stunden)', dstLong: ' (Sommerzeitende: 25 Stunden)',
    noData: 'Keine Daten für diesen Zeitraum', powerW: 'Leistung (W)', importWh: 'Bezug (Wh)', exportWh: 'Einspeisung (Wh)',
    importKWh: 'Bezug (kWh)', exportKWh: 'Einspeisung (kWh)', sum: 'Summe', tzNote: 'Zeitachse in der Zeitzone des Geräts',
    save: 'Speichern', saved: 'Gespeichert.', nothingChanged: 'Nichts geändert.', appliedNow: 'Sofort wirksam: %s',
    afterRestart: 'Wirksam nach Neustart: %s', mdnsTxt: 'Hinweis: mit diesen Funktionen zusammen meldet sich das Gerät im Netz ohne TXT-Einträge; Home Assistant findet es dann, richtet es aber nicht selbst ein (über die IP-Adresse hinzufügen).', restartNow: 'Jetzt neu starten', restarting: 'Startet neu …',
    fixErrors: 'Bitte die markierten Felder korrigieren.', keepPw: 'leer lassen = gespeichertes behalten',
    clearPw: 'Gespeichertes Passwort löschen', pwSet: 'gesetzt', pwNotSet: 'nicht gesetzt',
    confirmAp: 'Zugangspunkt-Schutz ohne Passwort aktivieren? Ohne Passwort startet der Zugangspunkt ungeschützt.',
    general: 'Allgemein', wifiPrimary: 'WLAN (primär)', wifiSecondary: 'WLAN (sekundär)', ap: 'Zugangspunkt',
    mqtt: 'MQTT', modbus: 'Modbus TCP', cloud: 'Cloud', meter: 'Zähler', ca: 'CA-Zertifikat (TLS)',
    emulation: 'Emulation', emuIp: 'die IP-Adresse dieses Geräts',
    emuShelly: 'Shelly: in der App des Speichers %s eintragen. Marstek: „Shelly Pro 3EM“ wählen, UDP-Port 1010 (Venus, Jupiter, B2500 bis Firmware 224) oder 2220 (B2500 ab 226). Hoymiles, Growatt und Zendure finden es per mDNS und fragen HTTP-Port 80.',
    emuSma: 'SMA: Wechselrichter, Home Manager und EVCC sehen ein SMA Energy Meter mit der Seriennummer %s.',
    emuAuth: 'Die Emulation antwortet ohne Token (Speicher können keins senden); sie liefert nur Messwerte und ändert nichts.',
    caCustom: 'Eigenes Zertifikat gespeichert (%s Bytes)', caNone: 'Kein eigenes Zertifikat', upload: 'Hochladen',
    scan: 'Netzwerke suchen', scanning: 'Suche läuft …', noNetworks: 'Keine Netzwerke gefunden', networks: 'Gefundene Netzwerke',
    openNet: 'offen',
    remove: 'Löschen', pairToken: 'Kopplungs-Token', pair: 'Koppeln', unpair: 'Entkoppeln',
    tokenWrong: 'Falsches Token: das Gerät kennt es nicht. Bitte noch einmal.', tokenReadOnly: 'Das ist das READ-Token; diese Änderung braucht das WRITE-Token.', tokenFile: 'oder die Token-Datei laden:', remember: 'In diesem Browser merken', copy: 'Kopieren', copied: 'Kopiert', downloadPair: 'Als Datei speichern', fileSaved: 'Gespeichert: meterplus-tokens.txt', rotateHelp: 'Erzeugt ein READ- und ein WRITE-Token. Speichern Sie beide (Datei oder kopieren), dann bestätigen Sie innerhalb von 60 s.', pairExpired: 'Zu spät bestätigt: die neuen Tokens gelten nicht, die alten bleiben. Bitte neu erzeugen.', pairFirst: 'Erzeugen und bestätigen Sie zuerst ein Token-Paar (oben); dann lässt sich die Anmeldung einschalten.', authNowOn: 'Anmeldung eingeschaltet: ohne Token gibt das Gerät nichts mehr heraus.', authNowOff: 'Anmeldung ausgeschaltet.', tokenRemembered: 'Ein Token ist in diesem Browser gespeichert.',
    sections: 'Bereiche', unsaved: 'ungespeicherte Änderungen', apRunning: 'Der Zugangspunkt „%s“ läuft gerade.', apStopped: 'Der Zugangspunkt ist gerade aus.',
    sysDevice: 'Gerät', sysUp: 'Läuft seit', sysUpFor: '%s (gestartet %s; Grund: %s)', sysWifiOn: 'verbunden mit „%s“, Signal %s dBm (%s), Adresse %s, %s', sigGood: 'gut', sigFair: 'mittel', sigWeak: 'schwach', sysApOn: '„%s“ an, Adresse %s', sysMeter: '%s, %s Telegramme, %s Prüfsummenfehler, %s', sysClock: 'gestellt: %s (%s), Zeitserver %s', sysHeap: 'Arbeitsspeicher', sysHeapFree: '%s KB frei, größter Block %s KB', sysOff: 'Abgeschaltet', sysRaw: 'Alle Werte (technisch)',
    zoomHint: 'Zum Vergrößern mit der Maus über einen Zeitraum ziehen.', zoomReset: 'Alles zeigen', livePower: 'Leistung der letzten 15 Minuten (W)', totals: 'Monate und Jahr', year: 'Jahr', month: 'Monat', balanceKWh: 'Saldo (kWh)', yearTotal: 'Jahr %s',
    e_bad_request: 'Anfrage nicht verstanden.', e_invalid_fields: 'Einige Werte sind ungültig.', e_token_missing_or_wrong: 'Token fehlt oder ist falsch.', e_write_token_needed: 'Dafür ist das WRITE-Token nötig.', e_cross_site: 'Von fremder Seite: abgelehnt.', e_not_found: 'Nicht gefunden.', e_conflict: 'Gerät gerade beschäftigt.', e_pair_mismatch: 'Kein passendes Token-Paar: neu erzeugen.', e_pair_expired: 'Zu spät bestätigt: neu erzeugen.', e_recovery_code_needed: 'Den Code eingeben, den das Gerät zeigt.', e_recovery_code_wrong: 'Falscher Code.', e_recovery_closed: 'Dreimal falscher Code: Taster erneut drücken (neuer Code).', e_too_large: 'Zu groß für das Gerät.', e_too_many_requests: 'Zu viele Anfragen: kurz warten.', e_busy: 'Gerät ausgelastet: gleich noch einmal.', e_unavailable: 'Funktion läuft gerade nicht.', e_storage_failed: 'Speichern fehlgeschlagen (Flash voll?).', e_device_error: 'Fehler im Gerät.', o_installing: '%s wird installiert; Neustarts in 2–3 min.', o_already_running: 'Das Update läuft bereits.', o_no_update: 'Kein Update verfügbar.', o_trial: 'Letztes Update wird noch erprobt: später.', o_busy: 'Update läuft: gleich noch einmal.', o_busy_upload: 'Ein Upload läuft.', o_no_app: 'Keine Anwendung auf dem Laufwerk.', o_done: 'Geprüft: wird installiert, Neustart folgt.', o_signature: 'Abgelehnt: Signatur fehlt oder falsch.', o_archive: 'Abgelehnt: kein Update-Archiv.', o_manifest: 'Abgelehnt: Manifest fehlerhaft.', o_oversized: 'Abgelehnt: zu groß.', o_corrupted: 'Abgelehnt: Datei beschädigt.', o_truncated: 'Abgelehnt: Datei unvollständig.', o_version: 'Abgelehnt: nicht neuer.', o_drive_full: 'Abgelehnt: Laufwerk voll.', o_drive: 'Abgelehnt: Schreibfehler.', o_memory: 'Abgelehnt: zu wenig Speicher.',
    tokenTitle: 'Zugangs-Token', tokenAsk: 'Das Gerät verlangt ein Token. Bitte eingeben:', tokenLost: 'Token verloren?', tokenLostHelp: 'Nach dem kurzen Druck auf den Taster den Code des Geräts eingeben und hier ein neues Paar erzeugen (die Einstellungen bleiben). Die LED leuchtet 2 s türkis, dann blinkt sie jede der 6 Ziffern so oft, wie sie zählt.', recoveryCode: 'Code vom Gerät', tokenWrite: 'Diese Aktion braucht das WRITE-Token.',
    skip: 'Zum Inhalt springen', today: 'Heute (Saldo)', balanceImport: 'mehr bezogen als eingespeist', balanceExport: 'mehr eingespeist als bezogen', status: 'Status', stMeter: 'Zähler', stMeterLive: 'live (vor %s s)', stMeterStale: 'keine Daten seit %s s', stMeterNone: 'kein Signal', stWifi: 'WLAN', stApName: 'Zugangspunkt', stAp: '%s (%s)', stNoWifi: 'nicht verbunden', wifiPw: 'Passwort falsch', wifiGone: 'Netz nicht in Reichweite', stOff: 'aus', stConnected: 'verbunden', stMqtt_CONNECTING: 'verbindet …', stMqtt_INIT: 'startet …', stMqtt_FAILED: 'Fehler', stModbusOn: 'an (%s Verbindungen)', stClock: 'Uhr', stClockOk: 'gestellt', stClockNot: 'nicht gestellt', stUpdate: 'Update', stUpdateAvail: '%s verfügbar', stateOk: 'in Ordnung', liveTail: 'Live mitlesen (alle 5 s)', theme_auto: 'Darstellung: wie das System', theme_light: 'Darstellung: hell', theme_dark: 'Darstellung: dunkel', otaUpload: 'Update aus Datei installieren …', confirmUpload: '%s jetzt installieren? Das Gerät startet danach neu.', uploading: '%s wird übertragen und geprüft …', restartWait: 'Das Gerät startet neu, die Seite lädt sich von selbst neu, sobald es wieder antwortet (%s s).', restartLate: 'Das Gerät antwortet seit 2 Minuten nicht. Ist es noch im selben Netz? Sonst hilft ein Blick auf die LED.', reload: 'Seite neu laden', backup: 'Sicherung', backupHelp: 'Die Sicherung enthält alle Einstellungen außer Passwörtern, WLAN und Zugangspunkt; beim Einspielen bleiben diese, wie sie sind.', backupSave: 'Einstellungen herunterladen', backupRestore: 'Sicherung einspielen …', restoreNotBackup: 'Diese Datei ist keine Meter-Plus-Sicherung: nichts geändert.', restored: 'Sicherung eingespielt: %s Einstellungen geändert.', secretsDropped: 'Gespeicherte Zugangsdaten entfernt, weil ihr Ziel sich geändert hat: %s. Bitte neu eingeben.', restoreRefused: 'Sicherung abgelehnt, nichts geändert:', factoryResetHelp: 'Werkseinstellungen: den BOOT-Taster 10 Sekunden halten, bis die LED rot leuchtet (WLAN, Tokens und Einstellungen werden gelöscht, der Verlauf bleibt).', signIn: 'Anmelden', signOut: 'Token vergessen', cancel: 'Abbrechen', tokenInSession: 'Ein Token ist für diese Sitzung gespeichert.',
    noToken: 'Kein Token gespeichert.', authRequired: 'Token-Anmeldung verlangen (api_auth_required)',
    authOn: 'Anmeldung ist eingeschaltet.', authOff: 'Anmeldung ist ausgeschaltet: jeder im Netz kann lesen und ändern.',
    rotate: 'Neue Tokens erzeugen', pending: 'Neues Token-Paar (nur jetzt sichtbar: bitte notieren)',
    confirmTokens: 'Tokens bestätigen', expiresIn: 'Gültig noch %s s', expired: 'Abgelaufen: bitte neu erzeugen.',
    tokensActive: 'Neue Tokens aktiv; die alten gelten nicht mehr. Dieser Browser meldet sich mit dem WRITE-Token an.',
    readToken: 'READ-Token', writeToken: 'WRITE-Token', enable: 'Einschalten', disable: 'Ausschalten',
    info: 'Geräteinformation', led: 'Status-LED', logs: 'Protokolle', persistentLog: 'Dauerhaftes Protokoll',
    ramLog: 'RAM-Protokoll', load: 'Laden', rawdump: 'Rohdaten des Lesekopfs herunterladen', ota: 'Update',
    otaCheck: 'Auf Update prüfen', otaStart: 'Update starten', otaNone: 'Kein Update verfügbar (installiert: %s)',
    otaAvail: 'Update verfügbar: %s', reboot: 'Neu starten', confirmReboot: 'Gerät jetzt neu starten?',
    empty: '(leer)', error: 'Fehler', checkedPage: 'Ungültig',
    r_len: 'höchstens %s Zeichen', r_bytes: 'höchstens %s Bytes', r_wpa: '8 bis 63 Bytes (WPA2)', r_int: 'ganze Zahl %s bis %s',
    r_ip: 'IPv4-Adresse wie 192.168.1.10', r_ip_zero: 'keine Host-Adresse (0.0.0.0/8)', r_ip_loop: 'Loopback-Adresse',
    r_ip_multi: 'Multicast-Adresse', r_ip_reserved: 'reservierter Bereich 240.0.0.0/4', r_ip_bcast: 'Broadcast-Adresse',
    r_mask30: 'höchstens /30 (255.255.255.252)', r_url: 'URL mit http oder https', r_unicode: 'ungültiges Unicode', r_mask: 'Netzmaske wie 255.255.255.0', r_host: 'Hostname oder IPv4-Adresse',
    r_ratio: '1 bis 10000 in Schritten von 0,1', r_topic: 'ohne +, # und ohne / am Ende', r_ctrl: 'keine Steuerzeichen',
    r_required: 'erforderlich', r_max: 'höchstens %s Adressen', r_apPw: 'mindestens 8 Zeichen',
    f: {
      device_name: 'Gerätename', ledEnable: 'Status-LED an', 'language.active': 'Sprache der Werte in API und MQTT', timezone: 'Zeitzone',
      ntp_server: 'NTP-Server', medianFilterSize: 'Medianfilter', ctRatio: 'Wandlerfaktor (ctRatio)', autoOta: 'Automatische Updates',
      'history.flushMinutes': 'Verlauf auf Flash schreiben alle (min)', cloudIotEnabled: 'Cloud-Verbindung', 'ota.url': 'Update-Quelle (Manifest-URL)',
      'cloud.host': 'Cloud-Server', 'cloud.port': 'Cloud-Port', 'accessPoint.enable': 'Dauerhaft an (sonst 15 min nach dem Einschalten, dann aus, wenn niemand verbunden ist)',
      ssid: 'SSID', password: 'Passwort', enable: 'Aktiv', static_ip: 'Feste IP-Adresse', ip: 'IP-Adresse', subnet: 'Netzmaske',
      gateway: 'Gateway', dns: 'DNS-Server (leer = Gateway)', password_enable: 'Mit Passwort schützen (WPA2)',
      host: 'Broker', port: 'Port', use_tls: 'TLS', user: 'Benutzer', client_id: 'Client-ID (leer = automatisch)',
      topic_prefix: 'Topic-Präfix (leer = automatisch)', sendInterval: 'Sendeintervall (s)', discovery_prefix: 'Home-Assistant-Präfix',
      model: 'SunSpec-Modell', off: 'Aus',
      shelly: 'Als Shelly Pro 3EM antworten', shellyUdpPort: 'UDP-Port (0 = aus)', shellyUdpPort2: 'Zweiter UDP-Port (0 = aus)',
      sma: 'Als SMA Energy Meter senden', smaSerial: 'Seriennummer (0 = aus der Geräte-ID)', smaSusyId: 'SUSy-ID',
      smaTargets: 'Unicast-Empfänger (IPv4, mit Komma getrennt; leer = nur Multicast)',
    },
  },
  en: {
    mq_auth: 'Broker refuses: user name or password wrong', mq_refused: 'Broker refuses (code %s)', mq_dns: 'Broker name unknown',
    mq_tls: 'TLS error: check the certificate', mq_down: 'Broker not reachable', mq_cfg: 'No broker set', mq_next: '%s · next try in %s',
    recover: 'Token lost? Press the button on the device briefly: the device then shows a code (the LED blinks it in cyan, the serial console prints it) with which a new token pair can be made without a token for 2 minutes. Holding the BOOT button for 10 s resets the device entirely (factory settings, tokens too).',
    confirmAuthOn: 'Switch the login on? Every browser then needs the token.', authNeedsToken: 'Generate a token pair, save or copy it and confirm it first: this browser has none.',
    pairSaveFirst: 'Save or copy it first.', confirmSignOut: 'Forget the token in this browser? Without the token file this browser cannot reach the device any more.',
    otaNoServer: 'No update server set up (ota.url): nothing to check (installed: %s).', otaChecking: 'Checking …', otaFailed: 'Check failed: %s',
    autoOtaNoServer: 'does nothing without an update server', time: 'Time',
    r_own: "is the device's own address (IP)", r_outside: 'outside the subnet %s', r_netaddr: 'network address of %s', r_bcaddr: 'broadcast address of %s', r_bad: 'not valid', r_bool: 'yes or no',
    ob: ['Import', 'Export', 'tariff', 'Active power', 'Import power', 'Export power', 'Absolute active power', 'Voltage', 'Current', 'Grid frequency'],
    why_first_start: 'First start (no outage)', led_OK: 'fine', led_STARTUP: 'starting', led_INFO: 'note', led_BLE_ACTIVE: 'Bluetooth on', led_BLE_CONNECTED: 'Bluetooth connected', led_OTA_ACTIVE: 'updating', led_ERROR: 'error', led_RESET_PENDING: 'resetting', led_solid: 'steady', joinTestOnly: 'Test the connection', mqTesting: 'Testing %s … (nothing is stored)', mqTestOk: 'Connection works: %s accepts. Nothing stored.', mqNothing: 'Nothing stored.', mqPwWithheld: 'Tried without a password: the stored one goes only to the stored broker (with TLS if stored so); type it to test this one.', logTime: 'Time (local)', logFilter: 'Filter', logNewer: 'Newer', logOlder: 'Older', logRange: '%s–%s of %s', chartRange: '%s from %s to %s', chartKeys: 'arrow keys step through the values', balanceEven: 'import and export equal', unknownTab: 'No section "%s": here are the general settings.', restoreAsk: 'The backup changes %s settings (now → new):', restoreApply: 'Restore', emuAddr: 'This device\'s address: %s %s', emuWaiting: 'Shelly ready (UDP %s), no request yet.', emuAsking: 'A battery has been asking since %s · %s answers', emuQuiet: 'No request since %s.', otaTrial: 'Updated: %s → %s, on trial (final after 3 healthy minutes, else rolled back).', otaNow: 'Updated: %s → %s.', otaNotTaken: 'Update not taken: still running %s.',
    setupTitle: 'Setup', setupHelp: 'The device is new. Four steps:', setupWifi: 'Connect to WiFi', setupZone: 'Check the time zone (%s)',
    setupAp: 'Protect the access point with a password', setupTokens: 'Create tokens', setupDone: 'done', setupHide: 'Hide',
    dashboard: 'Dashboard', history: 'History', settings: 'Settings', security: 'Security', system: 'System',
    money: 'Cost', priceNow: 'Price now', costToday: 'Cost today', // issue 29
    power: 'Power', importing: 'Importing from the grid', exporting: 'Feeding into the grid', idle: 'No flow',
    importTotal: 'Import total', exportTotal: 'Export total', unknown: 'unknown',
    stale: 'Meter silent: values unknown', meterHealth: 'Meter link', lastTelegram: 'Last telegram',
    secondsAgo: '%s s ago', crcErrors: 'CRC errors', protocol: 'Protocol', telegrams: 'Telegrams', state: 'State',
    values: 'Readings', updated: 'Updated', offline: 'Device not reachable', busy: 'Device busy: next try in %s s',
    day: 'Day', nDays: (n) => (n === 1 ? '1 day' : n + ' days'), range: 'Range', from: 'From', days: 'Days', show: 'Show', csv: 'Download CSV',
    gapImport: 'Import, averaged over the gap (Wh)', gapExport: 'Export, averaged over the gap (Wh)',
    gapsTitle: (n) => (n === 1 ? '1 gap:' : n + ' gaps:'), gapsNote: 'Device off or meter silent. The energy of that time came with the first quarter hour after it and is spread over the gap in grey.',
    gapWithout: '%s without data', spanS: '%s s', spanM: '%s min', spanHM: '%s h %s min', spanDH: '%s d %s h',
    outages: 'Outages and restarts', outDown: 'Down since', outUp: 'Back up', outDuration: 'Duration', outReason: 'Reason',
    csvExcel: 'CSV for German Excel: semicolons and decimal commas',
    joinTest: 'Test the connection and save', joinNoSsid: 'Please enter an SSID first.',
    joining: 'Joining "%s" … (the access point stays on)',
    joined: 'Joined "%s" and saved. The device is at %s there (also as %s).',
    join_wrong_password: 'The password for "%s" is wrong. Nothing was saved.',
    join_network_not_found: 'No network "%s" in range. Nothing was saved.',
    join_failed: 'Could not join "%s". Nothing was saved.',
    settingsDamaged: 'The stored settings were damaged: the defaults are in use. Authentication stays as it was. Please check the settings and save them.',
    noOutages: 'No entries yet.', confirmOta: 'Install the update now? The device restarts.',
    why_poweron: 'Power on', why_power: 'Power cut', why_brownout: 'Brownout', why_watchdog: 'Watchdog (crash or hang)', why_crash: 'Crash',
    why_ota: 'Update', why_rollback: 'Update rolled back', why_restart: 'Restart (web interface/API)', why_button: 'Button',
    why_reset_pin: 'Reset button', why_software: 'Restart by software', why_unknown: 'unknown',
    quarterHours: '%s quarter hours', dstShort: ' (DST starts: 23 hours)', dstLong: ' (DST ends: 25 hours)',
    noData: 'No data for this period', powerW: 'Power (W)', importWh: 'Import (Wh)', exportWh: 'Export (Wh)',
    importKWh: 'Import (kWh)', exportKWh: 'Export (kWh)', sum: 'Total', tzNote: 'Time axis in the device time zone',
    save: 'Save', saved: 'Saved.', nothingChanged: 'Nothing changed.', appliedNow: 'Applied now: %s',
    afterRestart: 'After a restart: %s', mdnsTxt: 'Note: with these features together the device announces itself without TXT records; Home Assistant then finds it but cannot set it up by itself (add it by its IP address).', restartNow: 'Restart now', restarting: 'Restarting …',
    fixErrors: 'Please correct the marked fields.', keepPw: 'empty = keep the stored one',
    clearPw: 'Delete the stored password', pwSet: 'set', pwNotSet: 'not set',
    confirmAp: 'Enable access point protection without a password? Without one the access point starts unprotected.',
    general: 'General', wifiPrimary: 'WiFi (primary)', wifiSecondary: 'WiFi (secondary)', ap: 'Access point',
    mqtt: 'MQTT', modbus: 'Modbus TCP', cloud: 'Cloud', meter: 'Meter', ca: 'CA certificate (TLS)',
    emulation: 'Emulation', emuIp: "this device's IP address",
    emuShelly: "Shelly: enter %s in the battery's app. Marstek: choose “Shelly Pro 3EM”, UDP port 1010 (Venus, Jupiter, B2500 up to firmware 224) or 2220 (B2500 from 226). Hoymiles, Growatt and Zendure find it by mDNS and poll HTTP port 80.",
    emuSma: 'SMA: inverters, Home Manager and EVCC see an SMA Energy Meter with the serial %s.',
    emuAuth: 'The emulation answers without a token (batteries cannot send one); it only gives readings and changes nothing.',
    caCustom: 'Custom certificate stored (%s bytes)', caNone: 'No custom certificate', upload: 'Upload',
    scan: 'Scan for networks', scanning: 'Scanning …', noNetworks: 'No networks found', networks: 'Networks found',
    openNet: 'open',
    remove: 'Delete', pairToken: 'Pairing token', pair: 'Pair', unpair: 'Unpair',
    tokenWrong: 'Wrong token: the device does not know it. Please try again.', tokenReadOnly: 'That is the READ token; this change needs the WRITE token.', tokenFile: 'or load the token file:', remember: 'Remember on this browser', copy: 'Copy', copied: 'Copied', downloadPair: 'Save as a file', fileSaved: 'Saved: meterplus-tokens.txt', rotateHelp: 'Creates a READ and a WRITE token. Keep both (file or copy), then confirm within 60 s.', pairExpired: 'Confirmed too late: the new tokens do not apply, the old ones stay. Please generate again.', pairFirst: 'Create and confirm a token pair first (above); then the login can be switched on.', authNowOn: 'Login switched on: without a token the device gives nothing away.', authNowOff: 'Login switched off.', tokenRemembered: 'A token is kept in this browser.',
    sections: 'Sections', unsaved: 'unsaved changes', apRunning: 'The access point "%s" is running now.', apStopped: 'The access point is off now.',
    sysDevice: 'Device', sysUp: 'Running for', sysUpFor: '%s (started %s; reason: %s)', sysWifiOn: 'connected to "%s", signal %s dBm (%s), address %s, %s', sigGood: 'good', sigFair: 'fair', sigWeak: 'weak', sysApOn: '"%s" on, address %s', sysMeter: '%s, %s telegrams, %s checksum errors, %s', sysClock: 'set: %s (%s), time server %s', sysHeap: 'Memory', sysHeapFree: '%s KB free, largest block %s KB', sysOff: 'Switched off', sysRaw: 'All values (technical)',
    zoomHint: 'Drag across a span with the mouse to zoom in.', zoomReset: 'Show all', livePower: 'Power over the last 15 minutes (W)', totals: 'Months and year', year: 'Year', month: 'Month', balanceKWh: 'Balance (kWh)', yearTotal: 'Year %s',
    e_bad_request: 'Request not understood.', e_invalid_fields: 'Some values are not valid.', e_token_missing_or_wrong: 'Token missing or wrong.', e_write_token_needed: 'This needs the WRITE token.', e_cross_site: 'From another site: refused.', e_not_found: 'Not found.', e_conflict: 'Device busy.', e_pair_mismatch: 'No matching token pair: generate again.', e_pair_expired: 'Too late: generate again.', e_recovery_code_needed: 'Enter the code the device shows.', e_recovery_code_wrong: 'Wrong code.', e_recovery_closed: 'Three wrong codes: press the button again (new code).', e_too_large: 'Too large for the device.', e_too_many_requests: 'Too many requests: wait a moment.', e_busy: 'Device busy: try again shortly.', e_unavailable: 'Function not running.', e_storage_failed: 'Saving failed (flash full?).', e_device_error: 'Error in the device.', o_installing: 'Installing %s; restarts within 2–3 min.', o_already_running: 'The update is already running.', o_no_update: 'No update available.', o_trial: 'Last update still on trial: later.', o_busy: 'Update running: try again shortly.', o_busy_upload: 'An upload is running.', o_no_app: 'No application on the drive.', o_done: 'Checked: installing, a restart follows.', o_signature: 'Refused: signature missing or wrong.', o_archive: 'Refused: not an update archive.', o_manifest: 'Refused: manifest broken.', o_oversized: 'Refused: too large.', o_corrupted: 'Refused: file damaged.', o_truncated: 'Refused: file incomplete.', o_version: 'Refused: not newer.', o_drive_full: 'Refused: drive full.', o_drive: 'Refused: write error.', o_memory: 'Refused: out of memory.',
    tokenTitle: 'Access token', tokenAsk: 'The device requires a token. Please enter it:', tokenLost: 'Token lost?', tokenLostHelp: 'After the short press on the button, enter the device\'s code and make a new pair here (the settings stay). The LED shines cyan for 2 s, then blinks each of the 6 digits as many times as it counts.', recoveryCode: 'Code from the device', tokenWrite: 'This action needs the WRITE token.',
    skip: 'Skip to content', today: 'Today (balance)', balanceImport: 'more imported than exported', balanceExport: 'more exported than imported', status: 'Status', stMeter: 'Meter', stMeterLive: 'live (%s s ago)', stMeterStale: 'no data for %s s', stMeterNone: 'no signal', stWifi: 'WiFi', stApName: 'Access point', stAp: '%s (%s)', stNoWifi: 'not connected', wifiPw: 'wrong password', wifiGone: 'network not in range', stOff: 'off', stConnected: 'connected', stMqtt_CONNECTING: 'connecting …', stMqtt_INIT: 'starting …', stMqtt_FAILED: 'error', stModbusOn: 'on (%s connections)', stClock: 'Clock', stClockOk: 'set', stClockNot: 'not set', stUpdate: 'Update', stUpdateAvail: '%s available', stateOk: 'fine', liveTail: 'Follow live (every 5 s)', theme_auto: 'Theme: as the system', theme_light: 'Theme: light', theme_dark: 'Theme: dark', otaUpload: 'Install an update from a file …', confirmUpload: 'Install %s now? The device restarts afterwards.', uploading: 'Sending and checking %s …', restartWait: 'The device is restarting; the page reloads by itself once it answers again (%s s).', restartLate: 'The device has not answered for 2 minutes. Is it still on the same network? The LED tells more.', reload: 'Reload the page', backup: 'Backup', backupHelp: 'The backup holds every setting except passwords, WiFi and the access point; restoring leaves those as they are.', backupSave: 'Download settings', backupRestore: 'Restore a backup …', restoreNotBackup: 'This file is not a Meter Plus backup: nothing changed.', restored: 'Backup restored: %s settings changed.', secretsDropped: 'Stored credentials removed because their destination changed: %s. Please enter them again.', restoreRefused: 'Backup refused, nothing changed:', factoryResetHelp: 'Factory reset: hold the BOOT button for 10 seconds until the LED turns red (WiFi, tokens and settings are wiped, the history stays).', signIn: 'Sign in', signOut: 'Forget token', cancel: 'Cancel', tokenInSession: 'A token is kept for this session.',
    noToken: 'No token kept.', authRequired: 'Require a token (api_auth_required)',
    authOn: 'Authentication is on.', authOff: 'Authentication is off: anyone on the network can read and change.',
    rotate: 'Generate new tokens', pending: 'New token pair (shown only now: write it down)',
    confirmTokens: 'Confirm tokens', expiresIn: 'Valid for %s s', expired: 'Expired: please generate again.',
    tokensActive: 'New tokens active; the old ones no longer work. This browser is signed in with the WRITE token.',
    readToken: 'READ token', writeToken: 'WRITE token', enable: 'Turn on', disable: 'Turn off',
    info: 'Device information', led: 'Status LED', logs: 'Logs', persistentLog: 'Persistent log',
    ramLog: 'RAM log', load: 'Load', rawdump: 'Download the IR head raw data', ota: 'Update',
    otaCheck: 'Check for update', otaStart: 'Start update', otaNone: 'No update available (installed: %s)',
    otaAvail: 'Update available: %s', reboot: 'Restart', confirmReboot: 'Restart the device now?',
    empty: '(empty)', error: 'Error', checkedPage: 'Invalid',
    r_len: 'at most %s characters', r_bytes: 'at most %s bytes', r_wpa: '8 to 63 bytes (WPA2)', r_int: 'integer %s to %s',
    r_ip: 'IPv4 address like 192.168.1.10', r_ip_zero: 'not a host address (0.0.0.0/8)', r_ip_loop: 'a loopback address',
    r_ip_multi: 'a multicast address', r_ip_reserved: 'reserved range 240.0.0.0/4', r_ip_bcast: 'the broadcast address',
    r_mask30: 'at most /30 (255.255.255.252)', r_url: 'an http or https URL', r_unicode: 'invalid Unicode', r_mask: 'netmask like 255.255.255.0', r_host: 'host name or IPv4 address',
    r_ratio: '1 to 10000 in steps of 0.1', r_topic: 'no +, # and no trailing /', r_ctrl: 'no control characters',
    r_required: 'required', r_max: 'at most %s addresses', r_apPw: 'at least 8 characters',
    f: {
      device_name: 'Device name', ledEnable: 'Status LED on', 'language.active': 'Language of API and MQTT values', timezone: 'Time zone',
      ntp_server: 'NTP server', medianFilterSize: 'Median filter', ctRatio: 'CT ratio', autoOta: 'Automatic updates',
      'history.flushMinutes': 'Write history to flash every (min)', cloudIotEnabled: 'Cloud connection', 'ota.url': 'Update source (manifest URL)',
      'cloud.host': 'Cloud server', 'cloud.port': 'Cloud port', 'accessPoint.enable': 'Always on (otherwise 15 min after power-on, then off unless someone is connected)',
      ssid: 'SSID', password: 'Password', enable: 'Enabled', static_ip: 'Static IP address', ip: 'IP address', subnet: 'Netmask',
      gateway: 'Gateway', dns: 'DNS server (empty = gateway)', password_enable: 'Protect with a password (WPA2)',
      host: 'Broker', port: 'Port', use_tls: 'TLS', user: 'User', client_id: 'Client ID (empty = automatic)',
      topic_prefix: 'Topic prefix (empty = automatic)', sendInterval: 'Publish interval (s)', discovery_prefix: 'Home Assistant prefix',
      model: 'SunSpec model', off: 'Off',
      shelly: 'Answer as a Shelly Pro 3EM', shellyUdpPort: 'UDP port (0 = off)', shellyUdpPort2: 'Second UDP port (0 = off)',
      sma: 'Send as an SMA Energy Meter', smaSerial: 'Serial (0 = from the device id)', smaSusyId: 'SUSy-ID',
      smaTargets: 'Unicast receivers (IPv4, comma-separated; empty = multicast only)',
    },
  },
};

let lang = localStorage.getItem('mp.lang') || ((navigator.language || '').startsWith('de') ? 'de' : 'en');
export const getLang = () => lang;
export function setLang(code) {
  if (T[code] && code !== lang) {
    lang = code;
    localStorage.setItem('mp.lang', code);
    document.documentElement.lang = code;
    return true;
  }
  return false;
}
document.documentElement.lang = lang;

// The text of key, or '' when this language has none (a code the device added after this page was built).
export const known = (key, ...args) => (T[lang][key] === undefined ? '' : t(key, ...args));

// t('key', a, b): the text with each %s replaced in turn.
export function t(key, ...args) {
  let s = T[lang][key];
  if (typeof s === 'function') return s(...args);
  if (s === undefined) s = key;
  for (const a of args) s = s.replace('%s', a);
  return s;
}
export const fieldLabel = (key) => {
  const f = T[lang].f;
  return f[key] || f[key.split('.').pop()] || key;
};
// A reading's name in the page's language from its OBIS code (the device names it in its own language): energy
// 1|2.8.t, power and phases by C modulo 20 (16 active, 1 import, 2 export, 12 voltage, 11 current), phase C div 20.
export function obisName(code, fallback) {
  const [c, d, e] = code.split('.').map(Number);
  const w = T[lang].ob;
  if (d === 8 && c < 3) return w[c - 1] + (e ? ' ' + w[2] + ' ' + e : '');
  const i = { 16: 3, 1: 4, 2: 5, 15: 6, 12: 7, 11: 8, 14: 9 }[c % 20];
  return d === 7 && i ? w[i] + (c > 20 ? ' L' + Math.floor(c / 20) : '') : fallback;
}
export const num = (v, digits) =>
  v === null || v === undefined || Number.isNaN(v)
    ? '–'
    : Number(v).toLocaleString(lang === 'de' ? 'de-DE' : 'en-GB', { minimumFractionDigits: digits, maximumFractionDigits: digits });
