-- A small SQLite database written for skyrl-gymenvs' text2sql rows (the same licence as the plugin, Apache-2.0).
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL, age INTEGER NOT NULL);
CREATE TABLE song (song_id INTEGER PRIMARY KEY, singer_id INTEGER NOT NULL REFERENCES singer(singer_id),
                   title TEXT NOT NULL, year INTEGER NOT NULL);
INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
  (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41), (5, 'John Nizinik', 'France', 43),
  (6, 'Tribal King', 'France', 25);
INSERT INTO song VALUES (1, 1, 'You', 1992), (2, 2, 'Dangerous', 2008), (3, 3, 'Hey Oh', 2013),
  (4, 4, 'Sun', 2003), (5, 5, 'Gentleman', 1999), (6, 6, 'Love', 2016);
