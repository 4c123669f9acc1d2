#!/bin/bash
wc -w < /app/data/words.txt | tr -d " " > /app/count.txt
