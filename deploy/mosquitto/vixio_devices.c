/*
 * vixio's mosquitto 2.0 plugin: Xiaozhi devices on an external mosquitto (docs/mqtt.md).
 *
 * The firmware never sends SUBSCRIBE, so a standard broker delivers nothing to it. This plugin:
 *   - authenticates devices with the credentials vixio's OTA issues (vixio/transports/xiaozhi/mqtt/
 *     credentials.py): username = the device key, password = base64url(HMAC-SHA256(secret,
 *     "mqtt|" + client id))[:32], the client id "<device id>|<Client-Id>" naming that key;
 *     and vixio's own connection with `server_username` / `server_password`;
 *   - lets a device publish only to <prefix>/<key>/up and read only <prefix>/<key>/down;
 *   - delivers what vixio publishes on <prefix>/<key>/down to that device's connection
 *     (mosquitto_broker_publish with its client id: queued to the client, no subscription);
 *   - publishes "<client id>" / "" on <prefix>/<key>/state when a device connects / leaves, so
 *     vixio knows who is reachable and with which Client-Id.
 *
 * Build: cc -shared -fPIC -O2 -o vixio_devices.so vixio_devices.c -lcrypto
 * mosquitto.conf:
 *   plugin /path/vixio_devices.so
 *   plugin_opt_secret <mqtt.secret>
 *   plugin_opt_server_username vixio
 *   plugin_opt_server_password <the password in mqtt.broker_url>
 *   plugin_opt_prefix vixio              (optional; mqtt.topic_prefix)
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>

#define MAX_ID 200
#define TABLE 4096

struct device {
	char *key;
	char *client_id;
	struct device *next;
};

static mosquitto_plugin_id_t *plugin_id;
static char *secret, *server_user, *server_password, *prefix;
static struct device *table[TABLE];
static unsigned long refused; /* publishes outside a device's own topic, logged and counted */

static unsigned bucket(const char *key)
{
	unsigned h = 2166136261u;
	for(; *key; key++) h = (h ^ (unsigned char)*key) * 16777619u;
	return h % TABLE;
}

static struct device **find(const char *key)
{
	struct device **at = &table[bucket(key)];
	while(*at && strcmp((*at)->key, key)) at = &(*at)->next;
	return at;
}

static int is_mac(const char *id)
{
	if(strlen(id) != 17) return 0;
	for(int i = 0; i < 17; i++){
		if(i % 3 == 2){ if(id[i] != ':') return 0; }
		else if(!isxdigit((unsigned char)id[i]) || isupper((unsigned char)id[i])) return 0;
	}
	return 1;
}

/* credentials.py device_key: a MAC's 12 hex digits, else "x" + the id in hex. */
static void device_key(const char *id, size_t len, char *out)
{
	char copy[MAX_ID + 1];
	memcpy(copy, id, len);
	copy[len] = 0;
	if(is_mac(copy)){
		int n = 0;
		for(size_t i = 0; i < len; i++) if(copy[i] != ':') out[n++] = copy[i];
		out[n] = 0;
		return;
	}
	out[0] = 'x';
	for(size_t i = 0; i < len; i++) sprintf(out + 1 + 2 * i, "%02x", (unsigned char)copy[i]);
}

static int password_ok(const char *client_id, const char *password)
{
	unsigned char digest[32];
	unsigned int size = 0;
	char message[MAX_ID + 8], encoded[48];
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	snprintf(message, sizeof(message), "mqtt|%s", client_id);
	if(!HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)message, strlen(message), digest, &size)) return 0;
	int n = 0;
	for(int i = 0; i < 24; i += 3){ /* the first 24 bytes are the 32 characters kept */
		unsigned v = digest[i] << 16 | digest[i + 1] << 8 | digest[i + 2];
		encoded[n++] = alphabet[v >> 18 & 63]; encoded[n++] = alphabet[v >> 12 & 63];
		encoded[n++] = alphabet[v >> 6 & 63]; encoded[n++] = alphabet[v & 63];
	}
	encoded[32] = 0;
	(void)n;
	return password && strlen(password) == 32 && CRYPTO_memcmp(encoded, password, 32) == 0;
}

static void announce(const char *key, const char *client_id)
{
	char topic[MAX_ID * 2 + 80];
	snprintf(topic, sizeof(topic), "%s/%s/state", prefix, key);
	mosquitto_broker_publish_copy(NULL, topic, (int)strlen(client_id), client_id, 1, true, NULL);
}

static int on_auth(int event, void *data, void *user)
{
	struct mosquitto_evt_basic_auth *ed = data;
	(void)event; (void)user;
	const char *client_id = mosquitto_client_id(ed->client);
	if(!ed->username || !client_id) return MOSQ_ERR_AUTH;
	if(!strcmp(ed->username, server_user)){
		return ed->password && strlen(ed->password) == strlen(server_password)
			&& CRYPTO_memcmp(ed->password, server_password, strlen(server_password)) == 0 ? MOSQ_ERR_SUCCESS : MOSQ_ERR_AUTH;
	}
	const char *bar = strchr(client_id, '|');
	char key[2 * MAX_ID + 2];
	if(!bar || bar == client_id || strlen(client_id) > MAX_ID) return MOSQ_ERR_AUTH;
	device_key(client_id, (size_t)(bar - client_id), key);
	if(strcmp(key, ed->username) || !password_ok(client_id, ed->password)) return MOSQ_ERR_AUTH;
	struct device **at = find(key);
	if(!*at){
		*at = calloc(1, sizeof(struct device));
		if(!*at) return MOSQ_ERR_NOMEM;
		(*at)->key = strdup(key);
	}
	free((*at)->client_id);
	(*at)->client_id = strdup(client_id);
	announce(key, client_id);
	return MOSQ_ERR_SUCCESS;
}

static int on_disconnect(int event, void *data, void *user)
{
	struct mosquitto_evt_disconnect *ed = data;
	(void)event; (void)user;
	const char *username = mosquitto_client_username(ed->client);
	const char *client_id = mosquitto_client_id(ed->client);
	if(!username || !client_id || !strcmp(username, server_user)) return MOSQ_ERR_SUCCESS;
	struct device **at = find(username);
	if(*at && (*at)->client_id && !strcmp((*at)->client_id, client_id)){
		struct device *gone = *at;
		*at = gone->next;
		announce(gone->key, "");
		free(gone->key); free(gone->client_id); free(gone);
	}
	return MOSQ_ERR_SUCCESS;
}

/* "<prefix>/<key>/<leaf>": the key into `key`, 1 when the topic has that shape. */
static int topic_key(const char *topic, const char *leaf, char *key, size_t size)
{
	size_t p = strlen(prefix);
	if(strncmp(topic, prefix, p) || topic[p] != '/') return 0;
	const char *start = topic + p + 1, *slash = strchr(start, '/');
	if(!slash || slash == start || (size_t)(slash - start) >= size || strcmp(slash + 1, leaf)) return 0;
	memcpy(key, start, (size_t)(slash - start));
	key[slash - start] = 0;
	return 1;
}

static int on_acl(int event, void *data, void *user)
{
	struct mosquitto_evt_acl_check *ed = data;
	(void)event; (void)user;
	const char *username = mosquitto_client_username(ed->client);
	char key[2 * MAX_ID + 2];
	if(!username) return MOSQ_ERR_ACL_DENIED;
	if(!strcmp(username, server_user)) return MOSQ_ERR_SUCCESS;
	int own = topic_key(ed->topic, ed->access == MOSQ_ACL_WRITE ? "up" : "down", key, sizeof(key)) && !strcmp(key, username);
	if(!own && ed->access == MOSQ_ACL_WRITE){
		refused++;
		if(refused <= 10 || refused % 1000 == 0)
			mosquitto_log_printf(MOSQ_LOG_WARNING, "vixio_devices: device %s published to %.80s, not its own topic "
				"(refused; %lu so far)", username, ed->topic, refused);
	}
	return own ? MOSQ_ERR_SUCCESS : MOSQ_ERR_ACL_DENIED;
}

static int on_message(int event, void *data, void *user)
{
	struct mosquitto_evt_message *ed = data;
	(void)event; (void)user;
	const char *username = mosquitto_client_username(ed->client);
	char key[2 * MAX_ID + 2];
	if(!username || strcmp(username, server_user) || !topic_key(ed->topic, "down", key, sizeof(key))) return MOSQ_ERR_SUCCESS;
	struct device **at = find(key);
	if(*at && (*at)->client_id)
		mosquitto_broker_publish_copy((*at)->client_id, ed->topic, (int)ed->payloadlen, ed->payload, 0, false, NULL);
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_plugin_version(int count, const int *versions)
{
	for(int i = 0; i < count; i++) if(versions[i] == 5) return 5;
	return -1;
}

int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **userdata, struct mosquitto_opt *opts, int count)
{
	(void)userdata;
	plugin_id = identifier;
	prefix = "vixio";
	for(int i = 0; i < count; i++){
		if(!strcmp(opts[i].key, "secret")) secret = opts[i].value;
		else if(!strcmp(opts[i].key, "server_username")) server_user = opts[i].value;
		else if(!strcmp(opts[i].key, "server_password")) server_password = opts[i].value;
		else if(!strcmp(opts[i].key, "prefix")) prefix = opts[i].value;
	}
	if(!secret || strlen(secret) < 16 || !server_user || !server_password || strlen(server_password) < 16){
		mosquitto_log_printf(MOSQ_LOG_ERR, "vixio_devices: plugin_opt_secret and plugin_opt_server_password "
			"(at least 16 characters each) and plugin_opt_server_username are required");
		return MOSQ_ERR_INVAL;
	}
	int rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_BASIC_AUTH, on_auth, NULL, NULL);
	if(!rc) rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl, NULL, NULL);
	if(!rc) rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL, NULL);
	if(!rc) rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL, NULL);
	return rc;
}

int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *opts, int count)
{
	(void)userdata; (void)opts; (void)count;
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_BASIC_AUTH, on_auth, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL);
	return MOSQ_ERR_SUCCESS;
}
