-- The shop's schema and a little data, as a migration would leave them (`--db-setup`).
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE orders (id serial PRIMARY KEY, item_id integer NOT NULL REFERENCES items (id));
INSERT INTO items VALUES (1, 'kettle'), (2, 'teapot'), (42, 'towel');
