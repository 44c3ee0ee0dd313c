"""Who may reach what: the listeners' TLS and SASL, Kafka's ACLs, a client's security settings.

The modules (docs/security.md is the user's page):

* `listeners.py` — a listener's address with its security protocol, in Kafka's form
  (`SASL_SSL://HOST:PORT`; the native listener says `TLS` where Kafka says `SSL`);
* `tls.py` — the node's TLS server context, every file checked before the node starts, and a
  client certificate's principal (`User:CN=alice,OU=eng`, as Kafka names it);
* `client_config.py` — a client's security settings, read from a Kafka client properties file
  (`--command-config`), as TLS contexts and as kafka-python's and librdkafka's settings;
* `acls.py` — Kafka's ACLs (resource types, operations, patterns, principals) and the decision
  Kafka's `AclAuthorizer` makes over them, pure;
* `acl_store.py` — the ACLs in ZooKeeper, in Kafka's layout (`/kafka-acl`, change notifications).
"""
